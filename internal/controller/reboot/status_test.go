package reboot

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootplan"
)

// A running rollout's progress (counts, the record's remaining nodes and
// message) may wait for the next batched status write; a rollout starting,
// stopping or completing, a failure, a condition's status or reason may
// not.
func TestProgressOnly(t *testing.T) {
	base := func() rebootv1.RebootGroupStatus {
		return rebootv1.RebootGroupStatus{
			Nodes: 10, MaxUnavailable: 2, Unavailable: 1, Needing: 5, Rebooting: 1, Done: 3,
			CurrentNodes:       []string{"a"},
			Rollout:            &rebootv1.RolloutStatus{Number: 1, State: rebootv1.RolloutRunning, Total: 9, Done: 3, Remaining: 6, RemainingNodes: []string{"a", "b"}},
			ObservedGeneration: 4,
			Conditions: []metav1.Condition{{Type: rebootv1.ConditionReady, Status: metav1.ConditionTrue,
				Reason: rebootv1.ReasonRollingOut, Message: "1 rebooting (a)", ObservedGeneration: 4}},
		}
	}
	cases := []struct {
		name     string
		change   func(*rebootv1.RebootGroupStatus)
		progress bool
	}{
		{"nothing", func(*rebootv1.RebootGroupStatus) {}, true},
		{"the next node approved", func(s *rebootv1.RebootGroupStatus) {
			s.Unavailable, s.Needing, s.Rebooting, s.CurrentNodes = 2, 4, 2, []string{"a", "b"}
			s.Conditions[0].Message = "2 rebooting (a, b)"
		}, true},
		{"a reboot done", func(s *rebootv1.RebootGroupStatus) {
			s.Done++
			s.Rollout.Done, s.Rollout.Remaining, s.Rollout.RemainingNodes = 4, 5, []string{"b"}
			s.Rollout.Message = "Rebooting: b"
		}, true},
		{"a node joined the rollout", func(s *rebootv1.RebootGroupStatus) {
			s.Rollout.Total, s.Rollout.Remaining, s.Rollout.RemainingNodes = 10, 7, []string{"a", "b", "c"}
		}, true},
		{"the rollout stopped", func(s *rebootv1.RebootGroupStatus) { s.Rollout.State = rebootv1.RolloutPaused }, false},
		{"the rollout completed", func(s *rebootv1.RebootGroupStatus) {
			s.Rollout.State, s.Rollout.Remaining, s.Rollout.RemainingNodes = rebootv1.RolloutComplete, 0, nil
		}, false},
		{"a new rollout", func(s *rebootv1.RebootGroupStatus) { s.Rollout.Number = 2 }, false},
		{"a rollout's reboot failed", func(s *rebootv1.RebootGroupStatus) {
			s.Rollout.Failed, s.Rollout.FailedNodes = 1, []string{"a"}
		}, false},
		{"the rollout's start", func(s *rebootv1.RebootGroupStatus) { s.Rollout.StartTime = metav1.Now() }, false},
		{"a reboot failed", func(s *rebootv1.RebootGroupStatus) { s.Failed++ }, false},
		{"a drain that evicted nothing", func(s *rebootv1.RebootGroupStatus) {
			s.LastDrain = &rebootv1.DrainRecord{Node: "a"}
		}, true},
		{"a drain that evicted pods", func(s *rebootv1.RebootGroupStatus) {
			s.LastDrain = &rebootv1.DrainRecord{Node: "a", Workloads: []rebootv1.WorkloadRef{{Namespace: "n", Kind: "Deployment", Name: "w"}}}
		}, false},
		{"a condition's reason", func(s *rebootv1.RebootGroupStatus) { s.Conditions[0].Reason = rebootv1.ReasonIdle }, false},
		{"a condition's status", func(s *rebootv1.RebootGroupStatus) { s.Conditions[0].Status = metav1.ConditionFalse }, false},
		{"a condition added", func(s *rebootv1.RebootGroupStatus) {
			s.Conditions = append(s.Conditions, metav1.Condition{Type: rebootv1.ConditionPaused, Status: metav1.ConditionFalse, Reason: rebootv1.ReasonPaused})
		}, false},
		{"a new generation observed", func(s *rebootv1.RebootGroupStatus) { s.ObservedGeneration = 5 }, false},
		{"the budget", func(s *rebootv1.RebootGroupStatus) { s.MaxUnavailable = 3 }, false},
	}
	t.Run("a rollout started", func(t *testing.T) {
		old := base()
		old.Rollout = nil
		if progressOnly(old, base()) {
			t.Error("progressOnly = true, want false")
		}
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old, changed := base(), base()
			c.change(&changed)
			if got := progressOnly(old, changed); got != c.progress {
				t.Errorf("progressOnly = %v, want %v", got, c.progress)
			}
			if old.CurrentNodes[0] != "a" || len(old.Conditions) != 1 || old.Unavailable != 1 ||
				old.Rollout != nil && (old.Rollout.Done != 3 || len(old.Rollout.RemainingNodes) != 2) {
				t.Error("progressOnly changed the status it was given")
			}
		})
	}
}

// A node of the written record that was rebooted in this rollout and asks
// again must reach the record at once: written later, the record would
// still list it as remaining and its first reboot would never count.
func TestAskedAgain(t *testing.T) {
	start := time.Date(2026, 11, 28, 7, 0, 0, 0, time.UTC)
	written := &rebootv1.RolloutStatus{Number: 1, State: rebootv1.RolloutRunning, StartTime: metav1.NewTime(start),
		RemainingNodes: []string{"a", "b"}}
	node := func(annotations ...string) rebootplan.Node {
		n := rebootplan.Node{Annotations: map[string]string{}}
		for i := 0; i+1 < len(annotations); i += 2 {
			n.Annotations[annotations[i]] = annotations[i+1]
		}
		return n
	}
	after, before := stamp(start.Add(time.Minute)), stamp(start.Add(-time.Hour))
	cases := []struct {
		name  string
		b     rebootplan.Node
		again bool
	}{
		{"waiting for its first reboot", node(rebootv1.AnnotationNeeded, "true"), false},
		{"rebooted in an earlier rollout, asking", node(rebootv1.AnnotationNeeded, "true", rebootv1.AnnotationRebootedAt, before), false},
		{"done in this rollout", node(rebootv1.AnnotationRebootedAt, after), false},
		{"done in this rollout, asking again", node(rebootv1.AnnotationNeeded, "true", rebootv1.AnnotationRebootedAt, after), true},
		{"done in this rollout, approved again", node(rebootv1.AnnotationInProgress, after, rebootv1.AnnotationRebootedAt, after), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nodes := map[string]rebootplan.Node{"a": node(rebootv1.AnnotationNeeded, "true"), "b": c.b}
			if got := askedAgain(written, nodes); got != c.again {
				t.Errorf("askedAgain = %v, want %v", got, c.again)
			}
		})
	}
	if askedAgain(nil, nil) {
		t.Error("askedAgain without a record")
	}
}
