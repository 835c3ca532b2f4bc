package agentkube

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/reference"
	"k8s.io/client-go/util/flowcontrol"
)

// EventRecorder records Events: client-go's events.EventRecorder, whose
// package this one does not link (it brings the typed clientset).
type EventRecorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// Event sending: an agent tells what needs a look (a failed reboot, an
// address it cannot attach), a few Events an hour; a burst is cut to the
// rate below, and the queue is dropped from rather than waited on, so that
// recording never holds up the agent's work.
const (
	eventQueue = 100
	eventQPS   = 1
	eventBurst = 25
	// maxNoteBytes is the API server's limit on an Event's note.
	maxNoteBytes = 1024
)

// Recorder is an EventRecorder that writes events.k8s.io/v1 Events, in the
// background, once each. Unlike client-go's broadcaster it neither
// aggregates repeated Events into series nor retries: the agents dedupe
// what they report themselves, and an Event lost to an unreachable API
// server is also in the agent's log.
type Recorder struct {
	c                    *Client
	controller, instance string
	queue                chan *eventsv1.Event
	limiter              flowcontrol.RateLimiter
	log                  logr.Logger
}

// NewRecorder makes the Recorder of component (the reporting controller);
// Run sends what it records.
func (c *Client) NewRecorder(component string, log logr.Logger) *Recorder {
	host, _ := os.Hostname()
	return &Recorder{
		c:          c,
		controller: component,
		instance:   component + "-" + host,
		queue:      make(chan *eventsv1.Event, eventQueue),
		limiter:    flowcontrol.NewTokenBucketRateLimiter(eventQPS, eventBurst),
		log:        log,
	}
}

// Eventf records an Event about regarding (and related, if not nil). It
// does not wait for the Event to be written.
func (r *Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if !r.limiter.TryAccept() {
		r.log.Info("Too many Events: not recording this one", "reason", reason)
		return
	}
	e, err := r.event(time.Now(), regarding, related, eventtype, reason, action, fmt.Sprintf(note, args...))
	if err != nil {
		r.log.Error(err, "Cannot record an Event", "reason", reason)
		return
	}
	select {
	case r.queue <- e:
	default:
		r.log.Info("Event queue full: not recording this one", "reason", reason, "note", e.Note)
	}
}

func (r *Recorder) event(t time.Time, regarding, related runtime.Object, eventtype, reason, action, note string) (*eventsv1.Event, error) {
	ref, err := reference.GetReference(r.c.scheme, regarding)
	if err != nil {
		return nil, err
	}
	var relatedRef *corev1.ObjectReference
	if related != nil {
		if relatedRef, err = reference.GetReference(r.c.scheme, related); err != nil {
			return nil, err
		}
	}
	if len(note) > maxNoteBytes {
		note = note[:maxNoteBytes]
	}
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%v.%x", ref.Name, t.UnixNano()), Namespace: ns},
		EventTime:           metav1.NewMicroTime(t),
		ReportingController: r.controller,
		ReportingInstance:   r.instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Related:             relatedRef,
		Note:                note,
		Type:                eventtype,
	}, nil
}

// Run writes the recorded Events until ctx ends.
func (r *Recorder) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-r.queue:
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := r.c.Create(wctx, e); err != nil && ctx.Err() == nil {
				r.log.Error(err, "Writing an Event", "reason", e.Reason, "note", e.Note)
			}
			cancel()
		}
	}
}
