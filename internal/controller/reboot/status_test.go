package reboot

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// A running rollout's progress counts may wait for the next batched status
// write; anything a reader acts on, or a new leader goes on from, may not.
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
		{"a reboot done", func(s *rebootv1.RebootGroupStatus) { s.Done++ }, false},
		{"the rollout record moved on", func(s *rebootv1.RebootGroupStatus) { s.Rollout.RemainingNodes = []string{"b"} }, false},
		{"a reboot failed", func(s *rebootv1.RebootGroupStatus) { s.Failed++ }, false},
		{"a condition's reason", func(s *rebootv1.RebootGroupStatus) { s.Conditions[0].Reason = rebootv1.ReasonIdle }, false},
		{"a condition's status", func(s *rebootv1.RebootGroupStatus) { s.Conditions[0].Status = metav1.ConditionFalse }, false},
		{"a condition added", func(s *rebootv1.RebootGroupStatus) {
			s.Conditions = append(s.Conditions, metav1.Condition{Type: rebootv1.ConditionPaused, Status: metav1.ConditionFalse, Reason: rebootv1.ReasonPaused})
		}, false},
		{"a new generation observed", func(s *rebootv1.RebootGroupStatus) { s.ObservedGeneration = 5 }, false},
		{"the budget", func(s *rebootv1.RebootGroupStatus) { s.MaxUnavailable = 3 }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old, changed := base(), base()
			c.change(&changed)
			if got := progressOnly(old, changed); got != c.progress {
				t.Errorf("progressOnly = %v, want %v", got, c.progress)
			}
			if old.CurrentNodes[0] != "a" || len(old.Conditions) != 1 || old.Unavailable != 1 {
				t.Error("progressOnly changed the status it was given")
			}
		})
	}
}
