package rebootplan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// A rollout is a group's work from the moment one of its nodes asks for a
// reboot while none runs until every node that asked since is rebooted
// (or failed, or withdrew its request). Its record lives in the group's
// status (rebootv1.RolloutStatus), not in the controller's memory, so that
// a rollout cut short by the end of a maintenance window, a pause, a
// manager restart or a new leader goes on with the nodes that remain.
//
// The record never decides which node reboots: the nodes' own annotations
// do (a node asks until its reboot is verified, when the controller
// removes its request and stamps rebooted-at in the same write), so a node
// whose reboot was verified is never rebooted again unless it asks again.
// The record says which of the nodes that asked are done, so that its
// counts span windows and leaders. Track is the one function that moves
// it on, used alike by the controller (which writes it) and by `kubectl
// kubext reboot status` (which shows it as the controller would write it
// now, even where the stored status lags).

// maxRolloutMessage bounds RolloutStatus.Message (the CRD's MaxLength).
const maxRolloutMessage = 1024

// Track moves a group's rollout record prev (nil when the group has none)
// on to what decision gd found, nodes being every node of the snapshot by
// name. It returns prev itself when nothing changed, a new record
// otherwise, and nil while the group has never had a rollout and no node
// asks. prev is not modified.
//
//   - A node of the group asks while it needs a reboot or holds a slot; a
//     slot held for a node that is gone (gd.Rebooting, not in nodes) asks
//     too.
//   - With no record, or a complete one, a rollout starts when a node asks
//     whose last reboot did not fail; its nodes are every node that asks.
//   - While it runs, every node that asks joins. A node of the rollout
//     that no longer asks is done if it was rebooted since the rollout
//     started (rebooted-at), and leaves it otherwise (its request was
//     withdrawn, it was deleted, or it moved to another group). A done
//     node that asks again joins again: one more reboot in the total.
//   - The rollout is complete when none of its nodes remains but failed
//     ones.
func Track(prev *rebootv1.RolloutStatus, gd *GroupDecision, nodes map[string]Node, now time.Time) *rebootv1.RolloutStatus {
	now = now.Truncate(time.Second) // what the API stores of a time
	inGroup := map[string]bool{}
	for _, n := range gd.Nodes {
		inGroup[n] = true
	}
	absent := map[string]bool{}
	for _, n := range gd.Rebooting {
		if _, ok := nodes[n]; !ok {
			absent[n] = true
		}
	}
	asks := func(name string) bool {
		if absent[name] {
			return true
		}
		n, ok := nodes[name]
		return ok && inGroup[name] && (n.Needs() || n.HoldsSlot())
	}
	failed := map[string]bool{}
	for _, n := range gd.Failed {
		failed[n] = true
	}

	r := &rebootv1.RolloutStatus{}
	members := map[string]bool{}
	if prev == nil || prev.State == rebootv1.RolloutComplete {
		starts := false
		for _, name := range slices.Concat(gd.Nodes, gd.Rebooting) {
			starts = starts || asks(name) && !failed[name]
		}
		if !starts {
			return prev
		}
		r.Number, r.StartTime = 1, metav1.NewTime(now)
		if prev != nil {
			r.Number = prev.Number + 1
		}
	} else {
		prev.DeepCopyInto(r)
		for _, name := range slices.Concat(prev.RemainingNodes, prev.FailedNodes) {
			switch {
			case asks(name):
				members[name] = true
			case rebootedSince(nodes[name], r.StartTime.Time):
				r.Done++
			}
		}
	}
	for _, name := range slices.Concat(gd.Nodes, gd.Rebooting) {
		if asks(name) {
			members[name] = true
		}
	}

	r.RemainingNodes, r.FailedNodes = nil, nil
	rebooting := false
	approved := map[string]bool{}
	for _, n := range gd.Approved {
		approved[n] = true
	}
	for name := range members {
		if failed[name] {
			r.FailedNodes = append(r.FailedNodes, name)
			continue
		}
		r.RemainingNodes = append(r.RemainingNodes, name)
		rebooting = rebooting || absent[name] || nodes[name].HoldsSlot() || approved[name]
	}
	slices.Sort(r.RemainingNodes)
	slices.Sort(r.FailedNodes)
	r.Remaining, r.Failed = int32(len(r.RemainingNodes)), int32(len(r.FailedNodes))
	r.Total = r.Done + r.Remaining + r.Failed

	r.State, r.Message, r.ResumeAt = rolloutState(r, gd, rebooting, members)
	switch {
	case r.State == rebootv1.RolloutComplete:
		r.WaitingSince = nil
		if r.CompletionTime == nil {
			r.CompletionTime = &metav1.Time{Time: now}
		}
	case r.State == rebootv1.RolloutRunning:
		r.WaitingSince = nil
	case prev == nil || r.Number != prev.Number || prev.State != r.State || prev.WaitingSince == nil:
		r.WaitingSince = &metav1.Time{Time: now}
	}
	if prev != nil && equality.Semantic.DeepEqual(prev, r) {
		return prev
	}
	return r
}

// rolloutState says where a rollout stands, why, and, while it waits for
// a window, when that opens. A rollout with reboots under way is Running
// unless the group is paused, halted or invalid: the window and the
// health gates only hold approvals.
func rolloutState(r *rebootv1.RolloutStatus, gd *GroupDecision, rebooting bool, members map[string]bool) (rebootv1.RolloutState, string, *metav1.Time) {
	switch {
	case r.Remaining == 0:
		msg := fmt.Sprintf("%d of %d reboots done", r.Done, r.Total)
		if r.Failed > 0 {
			msg += fmt.Sprintf("; failed: %s", strings.Join(r.FailedNodes, ", "))
		}
		return rebootv1.RolloutComplete, truncate(msg), nil
	case gd.Err != nil:
		return rebootv1.RolloutInvalid, truncate(gd.Err.Error()), nil
	case gd.Paused:
		return rebootv1.RolloutPaused, "spec.paused is set: no new reboots are approved", nil
	case gd.Halted:
		return rebootv1.RolloutHalted, truncate(fmt.Sprintf("Halted by failed reboots: %s; remove their %s annotation (or raise spec.maxFailures) to go on",
			strings.Join(gd.Failed, ", "), rebootv1.AnnotationFailed)), nil
	case rebooting:
		var now []string
		for _, n := range slices.Concat(gd.Rebooting, gd.Approved) {
			if members[n] && !slices.Contains(now, n) {
				now = append(now, n)
			}
		}
		slices.Sort(now)
		return rebootv1.RolloutRunning, truncate("Rebooting: " + strings.Join(now, ", ")), nil
	case !gd.InWindow:
		if gd.NextWindow.IsZero() {
			return rebootv1.RolloutWaitingForWindow, "No maintenance window is open", nil
		}
		at := metav1.NewTime(gd.NextWindow.Truncate(time.Second))
		return rebootv1.RolloutWaitingForWindow, "Outside the maintenance windows; resumes when the next opens at " +
			gd.NextWindow.UTC().Format(time.RFC3339), &at
	case gd.Held != nil:
		return rebootv1.RolloutGated, truncate(gd.Held.Reason + ": " + gd.Held.Message), nil
	}
	// Nothing under way, nothing of the group's holds it: its nodes wait
	// for reasons of their own, or for budget others use. The reasons,
	// not the messages, which may hold times that move on every look.
	var why []string
	for _, w := range gd.Waiting {
		if members[w.Node] && !slices.Contains(why, string(w.Reason)) {
			why = append(why, string(w.Reason))
		}
	}
	slices.Sort(why)
	if len(why) == 0 {
		return rebootv1.RolloutRunning, "", nil
	}
	return rebootv1.RolloutRunning, truncate("Nodes wait: " + strings.Join(why, ", ")), nil
}

// rebootedSince says whether the node's last verified reboot is from t or
// later.
func rebootedSince(n Node, t time.Time) bool {
	at, ok := n.time(rebootv1.AnnotationRebootedAt)
	return ok && !at.Before(t.Truncate(time.Second))
}

func truncate(s string) string {
	if len(s) <= maxRolloutMessage {
		return s
	}
	return s[:maxRolloutMessage-3] + "..."
}
