package reboot

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootplan"
	"github.com/kubext/kubext/internal/statuspatch"
)

// announce emits an Event on each node that waits, once per reason, e.g.
// "Max unavailable reached (2 of 2 unavailable), skipping reboot for now".
func (r *Reconciler) announce(s *state, d rebootplan.Decision) {
	waiting := map[string]bool{}
	for _, w := range d.Waiting() {
		waiting[w.Node] = true
		if r.announced[w.Node] == w.Reason {
			continue
		}
		r.announced[w.Node] = w.Reason
		if n, ok := s.nodes[w.Node]; ok {
			r.Recorder.Eventf(n, nil, corev1.EventTypeNormal, string(w.Reason), "Wait",
				"%s, skipping reboot for now (group %s)", w.Message, w.Group)
		}
	}
	for node := range r.announced {
		if !waiting[node] {
			delete(r.announced, node)
		}
	}
}

// report writes each RebootGroup's status (only when it changed, over the
// version it was read at) and the metrics.
func (r *Reconciler) report(ctx context.Context, s *state, d rebootplan.Decision, now time.Time, next *deadlines) error {
	nodes := map[string]rebootplan.Node{}
	for _, n := range s.snapshot(now).Nodes {
		nodes[n.Name] = n
	}
	nodesNeeding.Reset()
	nodesInProgress.Reset()
	nodesUnavailable.Reset()
	nodesWaiting.Reset()
	for _, gd := range d.Groups {
		// Every node that asks and holds no slot was either approved (it
		// holds one now) or told why it waits.
		needing := len(gd.Waiting)
		nodesNeeding.WithLabelValues(gd.Name).Set(float64(needing))
		nodesInProgress.WithLabelValues(gd.Name).Set(float64(len(gd.Rebooting)))
		nodesUnavailable.WithLabelValues(gd.Name).Set(float64(len(gd.Unavailable)))
		for _, w := range gd.Waiting {
			nodesWaiting.WithLabelValues(gd.Name, string(w.Reason)).Inc()
		}
		if needing > 0 && !gd.NextWindow.IsZero() {
			next.at(gd.NextWindow)
		}
		for i := range s.groups {
			if s.groups[i].Name != gd.Name {
				continue
			}
			if err := r.patchGroupStatus(ctx, &s.groups[i], gd, needing, nodes, now, next); err != nil {
				return err
			}
		}
	}
	return nil
}

// groupStatus says where a RebootGroup keeps its status, for statuspatch.
func groupStatus(rg *rebootv1.RebootGroup) (any, *int64) {
	return rg.Status, &rg.Status.ObservedGeneration
}

// progressBatch is how long a group's status may lag the progress of a
// running rollout (progressOnly): a rollout of a large group changes it on
// nearly every reconcile (every approval and every verified reboot), and
// writing it each time — a patch of a status listing every remaining node —
// took the single worker more time than anything else it does at 1,000
// nodes, ahead of the decisions waiting behind it.
const progressBatch = time.Second

// patchGroupStatus writes what the decision found for the group: through
// statuspatch, so only when it changed, over the version it was read at,
// with observedGeneration set (every decision is made for the generation
// read), a group deleted meanwhile being no error. The rollout record is
// moved on from the one read (rebootplan.Track). A change of progress
// counts alone waits until progressBatch after the group's last write.
func (r *Reconciler) patchGroupStatus(ctx context.Context, rg *rebootv1.RebootGroup, gd rebootplan.GroupDecision, needing int,
	nodes map[string]rebootplan.Node, now time.Time, next *deadlines) error {
	status := statuspatch.New(r.Client, rg, groupStatus)
	updated := rg.DeepCopy()
	st := &updated.Status
	st.Nodes = int32(len(gd.Nodes))
	st.MaxUnavailable = int32(gd.MaxUnavailable)
	st.Unavailable = int32(len(gd.Unavailable))
	st.Needing = int32(needing)
	st.Rebooting = int32(len(gd.Rebooting))
	st.Done = int32(gd.Done)
	st.Failed = int32(len(gd.Failed))
	st.CurrentNodes = slices.Clone(gd.Rebooting)
	st.NextWindow = nil
	if needing > 0 && !gd.NextWindow.IsZero() {
		st.NextWindow = &metav1.Time{Time: gd.NextWindow}
	}
	st.Rollout = rebootplan.Track(rg.Status.Rollout, &gd, nodes, now)
	if o, ok := r.drainOutcome[rg.Name]; ok && o.blocked == "" {
		st.LastDrain = r.lastDrain(rg)
	}
	r.setConditions(updated, gd, needing)
	st.ObservedGeneration = updated.Generation
	if last, ok := r.statusWritten[rg.Name]; ok && progressOnly(rg.Status, *st) && !askedAgain(rg.Status.Rollout, nodes) {
		if due := last.Add(progressBatch); r.Now().Before(due) {
			next.at(due)
			return nil
		}
	}
	if err := status.Patch(ctx, updated, nil); err != nil {
		if isConflict(err) {
			refusedWrites.WithLabelValues("group").Inc()
		}
		return err
	}
	if updated.ResourceVersion != rg.ResourceVersion {
		r.ownGroups.wrote(rg.ResourceVersion, updated)
		r.statusWritten[rg.Name] = r.Now()
	}
	r.announceRollout(rg, rg.Status.Rollout, st.Rollout)
	return nil
}

// progressOnly says whether a group's status moved from old to cur only in
// what a running rollout changes at every step: how many nodes are
// unavailable, need or are in a reboot, which ones, how many are done, the
// conditions' messages, the rollout record's counts, remaining nodes and
// message while the same rollout keeps running, and a last drain that
// evicted nothing. Everything else — a rollout starting, stopping or
// completing, the failed reboots, a condition's status or reason, the
// observed generation, the next window, a last drain that evicted pods —
// is written at once.
//
// The record may lag by progressBatch because Track moves it on from the
// record as written and the nodes as they are: a node of the written
// record's remaining nodes that no longer asks and was rebooted since the
// rollout started counts as done whenever it is seen so. The one thing a
// lag could lose, a node done and asking again before the record says it
// was done, is written at once (askedAgain).
func progressOnly(old, cur rebootv1.RebootGroupStatus) bool {
	if len(old.Conditions) != len(cur.Conditions) {
		return false
	}
	for _, c := range cur.Conditions {
		o := meta.FindStatusCondition(old.Conditions, c.Type)
		if o == nil || o.Status != c.Status || o.Reason != c.Reason || o.ObservedGeneration != c.ObservedGeneration {
			return false
		}
	}
	if old.Rollout != nil && cur.Rollout != nil {
		if old.Rollout.Number != cur.Rollout.Number || old.Rollout.State != rebootv1.RolloutRunning ||
			cur.Rollout.State != rebootv1.RolloutRunning {
			return false
		}
		o, c := *old.Rollout, *cur.Rollout
		o.Total, o.Done, o.Remaining, o.RemainingNodes, o.Message = c.Total, c.Done, c.Remaining, c.RemainingNodes, c.Message
		old.Rollout, cur.Rollout = &o, &c
	}
	if cur.LastDrain != nil && len(cur.LastDrain.Workloads) == 0 {
		// A drain that evicted nothing gives evictedPodsReady nothing to
		// wait for: a new leader that read the record before it checks
		// an earlier drain's workloads, never fewer.
		old.LastDrain = cur.LastDrain
	}
	old.Unavailable, old.Needing, old.Rebooting, old.CurrentNodes, old.Done, old.Conditions =
		cur.Unavailable, cur.Needing, cur.Rebooting, cur.CurrentNodes, cur.Done, cur.Conditions
	return equality.Semantic.DeepEqual(old, cur)
}

// askedAgain says whether a node of the written rollout record's remaining
// nodes was rebooted since the rollout started and asks again: Track, from
// a record written after that, would take it for a node still waiting for
// its first reboot and count one reboot too few.
func askedAgain(written *rebootv1.RolloutStatus, nodes map[string]rebootplan.Node) bool {
	if written == nil {
		return false
	}
	start := written.StartTime.Truncate(time.Second)
	for _, name := range written.RemainingNodes {
		n, ok := nodes[name]
		if !ok || !n.Needs() && !n.HoldsSlot() {
			continue
		}
		if at, err := time.Parse(time.RFC3339, n.Annotations[rebootv1.AnnotationRebootedAt]); err == nil && !at.Before(start) {
			return true
		}
	}
	return false
}

// announceRollout emits an Event on the group when its rollout, as just
// written, started or changed state: "Rollout 4 waits for the next
// maintenance window at T: 71 of 120 reboots done".
func (r *Reconciler) announceRollout(rg *rebootv1.RebootGroup, prev, ro *rebootv1.RolloutStatus) {
	if ro == nil || prev != nil && prev.Number == ro.Number && prev.State == ro.State {
		return
	}
	var reason, note string
	switch ro.State {
	case rebootv1.RolloutComplete:
		reason, note = EventRolloutComplete, "complete"
	case rebootv1.RolloutWaitingForWindow:
		reason, note = EventRolloutWaiting, "waits for the next maintenance window"
		if ro.ResumeAt != nil {
			note += " at " + ro.ResumeAt.UTC().Format(time.RFC3339)
		}
	case rebootv1.RolloutRunning:
		reason, note = EventRolloutRunning, "running"
		if prev != nil && prev.Number == ro.Number {
			reason, note = EventRolloutRunning, "resumed"
		}
	default:
		reason, note = EventRolloutWaiting, "stopped: "+string(ro.State)
		if ro.Message != "" {
			note += " (" + ro.Message + ")"
		}
	}
	r.Recorder.Eventf(rg, nil, corev1.EventTypeNormal, reason, "Rollout", "Rollout %d %s: %d of %d reboots done, %d remaining, %d failed",
		ro.Number, note, ro.Done, ro.Total, ro.Remaining, ro.Failed)
}

func (r *Reconciler) setConditions(rg *rebootv1.RebootGroup, gd rebootplan.GroupDecision, needing int) {
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&rg.Status.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: rg.Generation})
	}
	boolStatus := func(b bool) metav1.ConditionStatus {
		if b {
			return metav1.ConditionTrue
		}
		return metav1.ConditionFalse
	}

	set(rebootv1.ConditionPaused, boolStatus(gd.Paused), rebootv1.ReasonPaused, pick(gd.Paused,
		"spec.paused is set: no new reboots are approved", "Reboots are approved"))
	set(rebootv1.ConditionHalted, boolStatus(gd.Halted), rebootv1.ReasonTooManyFailures, pick(gd.Halted,
		fmt.Sprintf("Reboots failed on %s; remove the %s annotation from them (or raise spec.maxFailures) to go on",
			strings.Join(gd.Failed, ", "), rebootv1.AnnotationFailed), "Not halted"))
	set(rebootv1.ConditionStuck, boolStatus(len(gd.Stuck) > 0), rebootv1.ReasonRebootTimedOut, pick(len(gd.Stuck) > 0,
		fmt.Sprintf("Not back within rebootTimeoutSeconds, still holding their slots: %s", strings.Join(gd.Stuck, ", ")),
		"No reboot is overdue"))
	var overlaps []string
	for _, o := range gd.Overlapping {
		overlaps = append(overlaps, fmt.Sprintf("%s (%s)", o.Node, strings.Join(o.Groups, ", ")))
	}
	set(rebootv1.ConditionOverlapping, boolStatus(len(overlaps) > 0), rebootv1.ReasonNodesOverlap, pick(len(overlaps) > 0,
		"Nodes selected by more than one group are rebooted by none: "+strings.Join(overlaps, "; "),
		"No node of the group is selected by another group"))
	if o, ok := r.drainOutcome[rg.Name]; ok {
		if o.blocked != "" {
			set(rebootv1.ConditionDrainBlocked, metav1.ConditionTrue, rebootv1.ReasonDrainTimedOut, o.blocked)
		} else {
			set(rebootv1.ConditionDrainBlocked, metav1.ConditionFalse, rebootv1.ReasonDrained,
				fmt.Sprintf("The last drain (node %s) completed", o.node))
		}
	}

	switch {
	case rg.Spec.HealthGates == nil:
		meta.RemoveStatusCondition(&rg.Status.Conditions, rebootv1.ConditionGateHeld)
	case gd.Held != nil:
		set(rebootv1.ConditionGateHeld, metav1.ConditionTrue, gd.Held.Reason, gd.Held.Message)
	default:
		set(rebootv1.ConditionGateHeld, metav1.ConditionFalse, rebootv1.ReasonGatesPass, pick(needing > 0,
			"Every health gate passes", "No node waits for approval; the gates are checked when one does"))
	}

	switch {
	case gd.Err != nil:
		set(rebootv1.ConditionReady, metav1.ConditionFalse, rebootv1.ReasonInvalidSpec, gd.Err.Error())
	case gd.Paused:
		set(rebootv1.ConditionReady, metav1.ConditionFalse, rebootv1.ReasonPaused, "Paused")
	case gd.Halted:
		set(rebootv1.ConditionReady, metav1.ConditionFalse, rebootv1.ReasonTooManyFailures,
			fmt.Sprintf("Halted: %d failed reboot(s): %s", len(gd.Failed), strings.Join(gd.Failed, ", ")))
	case len(gd.Stuck) > 0:
		set(rebootv1.ConditionReady, metav1.ConditionFalse, rebootv1.ReasonRebootTimedOut,
			"Reboot overdue on "+strings.Join(gd.Stuck, ", "))
	case needing > 0 && !gd.InWindow:
		set(rebootv1.ConditionReady, metav1.ConditionTrue, rebootv1.ReasonOutsideWindow,
			fmt.Sprintf("%d node(s) wait for the next maintenance window at %s", needing, gd.NextWindow.UTC().Format(time.RFC3339)))
	case needing > 0 && gd.Held != nil:
		set(rebootv1.ConditionReady, metav1.ConditionTrue, gd.Held.Reason,
			fmt.Sprintf("%d node(s) wait for a health gate: %s", needing, gd.Held.Message))
	case needing > 0 || len(gd.Rebooting) > 0:
		set(rebootv1.ConditionReady, metav1.ConditionTrue, rebootv1.ReasonRollingOut,
			fmt.Sprintf("%d rebooting (%s), %d waiting, %d of %d unavailable (max %d)", len(gd.Rebooting),
				strings.Join(gd.Rebooting, ", "), needing, len(gd.Unavailable), len(gd.Nodes), gd.MaxUnavailable))
	default:
		set(rebootv1.ConditionReady, metav1.ConditionTrue, rebootv1.ReasonIdle, "No node needs a reboot")
	}
}

func pick(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}
