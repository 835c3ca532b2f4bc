// Package eventlog records each Event a controller records in its log too.
// Events expire an hour after their last occurrence, and a user reading
// them sees only their own objects; the log keeps them, with the object
// they concern, for whoever investigates later.
package eventlog

import (
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// Recorder is an events.EventRecorder that also logs every Event.
type Recorder struct {
	events.EventRecorder
	// Log receives every Event: Normal ones at Info level, Warnings at
	// Info level too, with type=Warning (logr has no warning level, and an
	// Event is not an error of the controller's).
	Log logr.Logger
}

// Wrap returns rec logging to log, or rec itself when it logs already.
func Wrap(rec events.EventRecorder, log logr.Logger) events.EventRecorder {
	if _, ok := rec.(Recorder); ok {
		return rec
	}
	return Recorder{EventRecorder: rec, Log: log}
}

// Eventf records the Event and logs it with the objects it names.
func (r Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
	kv := []any{"type", eventtype, "reason", reason, "action", action, "object", ref(regarding)}
	if related != nil {
		kv = append(kv, "related", ref(related))
	}
	r.Log.Info(fmt.Sprintf(note, args...), kv...)
}

// ref names an object namespace/name (name alone when cluster-scoped), or
// by its Go type when it has no metadata.
func ref(o runtime.Object) string {
	m, err := meta.Accessor(o)
	if err != nil {
		return fmt.Sprintf("%T", o)
	}
	if m.GetNamespace() == "" {
		return m.GetName()
	}
	return m.GetNamespace() + "/" + m.GetName()
}
