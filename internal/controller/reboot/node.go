package reboot

import (
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootplan"
)

// Event reasons on nodes and groups.
const (
	EventApproved      = "RebootApproved"
	EventDrained       = "Drained"
	EventDrainTimedOut = "DrainTimedOut"
	EventVerified      = "RebootVerified"
	EventStuck         = "RebootStuck"
	EventCancelled     = "RebootCancelled"
	// On groups, when their rollout (status.rollout) starts or changes
	// state.
	EventRolloutRunning  = "RolloutRunning"
	EventRolloutWaiting  = "RolloutWaiting"
	EventRolloutComplete = "RolloutComplete"
)

// advance moves one node holding a slot a step along the protocol: it
// drains an approved node and then orders its reboot, and verifies a
// rebooted one. It returns the write the step needs, if any (writeNodes
// makes it), and notes when the node is next due.
func (r *Reconciler) advance(s *state, name string, g group, now time.Time, next *deadlines) *nodeWrite {
	n, pn := s.nodes[name], s.planned[name]
	if !pn.HoldsSlot() {
		if t, ok := annotationTime(n, rebootv1.AnnotationRetryAfter); ok {
			next.at(t)
		}
		return nil
	}
	if _, ordered := n.Annotations[rebootv1.AnnotationNow]; !ordered {
		if !pn.Needs() {
			return r.withdraw(n, g, now)
		}
		return r.drainStep(n, g, now, next)
	}
	return r.verifyStep(n, g, now, next)
}

// noteNeeded records when each node asking for a reboot was first seen
// asking (the longest-waiting are approved first), and forgets it for a
// node that no longer asks and holds no slot: a request withdrawn while it
// waited (`kubectl kubext reboot cancel`, or needed removed by hand), so
// that asking again queues anew. Only the controller may write it
// (config/policy/reboot-order.yaml: the place in the queue is not the
// requester's to choose), so withdrawing leaves it to this. It is
// bookkeeping, made after the decisions: a thousand nodes asking at once
// must not hold up the first approvals.
func (r *Reconciler) noteNeeded(s *state, now time.Time) []*nodeWrite {
	var writes []*nodeWrite
	for _, name := range s.names() {
		n, pn := s.nodes[name], s.planned[name]
		_, noted := n.Annotations[rebootv1.AnnotationNeededSince]
		if pn.HoldsSlot() || noted == pn.Needs() {
			continue
		}
		c := n.DeepCopy()
		if noted {
			delete(c.Annotations, rebootv1.AnnotationNeededSince)
		} else {
			c.Annotations[rebootv1.AnnotationNeededSince] = stamp(now)
		}
		writes = append(writes, &nodeWrite{orig: n, changed: c})
	}
	return writes
}

// approve gives a node a slot: it records the approval and the boot ID the
// reboot must replace, cordons the node (noting that kubext did, so that it
// uncordons only what it cordoned), and, once that landed, starts the
// drain.
func (r *Reconciler) approve(s *state, name string, g group, now time.Time) *nodeWrite {
	w := markApproved(s, name, s.ledger.slots[name].Approval, now)
	w.landed = func() {
		c := w.changed
		delete(r.announced, name)
		r.event(c, g, corev1.EventTypeNormal, EventApproved, "Approve",
			"Marking node %s for reboot (group %s); cordoned, draining", name, g.name)
		r.drains.start(name, c.Annotations[rebootv1.AnnotationInProgress], g.spec.Drain, drainTimeLeft(c, g, now))
	}
	return w
}

// markApproved is the write of a granted approval to the node, conditional
// on the resourceVersion the grant was decided from: the records the
// reboot must replace the boot ID of, and the cordon (noted, so that
// kubext uncordons only what it cordoned). A node approved before its
// request was noted gets its needed-since too.
func markApproved(s *state, name, approval string, now time.Time) *nodeWrite {
	n := s.nodes[name]
	c := n.DeepCopy()
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[rebootv1.AnnotationInProgress] = approval
	c.Annotations[rebootv1.AnnotationBootID] = n.Status.NodeInfo.BootID
	delete(c.Annotations, rebootv1.AnnotationRetryAfter)
	if _, noted := c.Annotations[rebootv1.AnnotationNeededSince]; !noted {
		c.Annotations[rebootv1.AnnotationNeededSince] = stamp(now)
	}
	if !c.Spec.Unschedulable {
		c.Spec.Unschedulable = true
		c.Annotations[rebootv1.AnnotationCordonedByUs] = "true"
	}
	return &nodeWrite{orig: n, changed: c}
}

// drainTimeLeft is how long the drain of an approved node may still take:
// drain.timeoutSeconds from the approval.
func drainTimeLeft(n *corev1.Node, g group, now time.Time) time.Duration {
	approved, ok := annotationTime(n, rebootv1.AnnotationInProgress)
	if !ok {
		approved = now
	}
	return approved.Add(time.Duration(g.spec.Drain.TimeoutSeconds) * time.Second).Sub(now)
}

// drainStep drives the drain of an approved node: start it (again, after a
// controller restart), wait for it, then order the reboot or, when it timed
// out, give the slot back and retry the node later.
func (r *Reconciler) drainStep(n *corev1.Node, g group, now time.Time, next *deadlines) *nodeWrite {
	approval := n.Annotations[rebootv1.AnnotationInProgress]
	res, known := r.drains.result(n.Name, approval)
	switch {
	case !known:
		r.drains.start(n.Name, approval, g.spec.Drain, drainTimeLeft(n, g, now))
		return nil
	case !res.finished:
		return nil
	case res.err == nil:
		c := n.DeepCopy()
		c.Annotations[rebootv1.AnnotationNow] = stamp(now)
		next.at(now.Add(rebootTimeout(g.spec)))
		return &nodeWrite{orig: n, changed: c, order: true, group: g.name, landed: func() {
			r.drains.forget(n.Name)
			drainSeconds.Observe(res.took.Seconds())
			r.drainOutcome[g.name] = drainOutcome{node: n.Name, evicted: res.evicted}
			r.event(c, g, corev1.EventTypeNormal, EventDrained, "Reboot",
				"Node %s drained in %s; ordering its reboot", n.Name, res.took.Round(time.Millisecond))
		}}
	default:
		retryAt := now.Add(r.drains.backoff(n.Name))
		c := n.DeepCopy()
		release(c)
		c.Annotations[rebootv1.AnnotationRetryAfter] = stamp(retryAt)
		next.at(retryAt)
		return &nodeWrite{orig: n, changed: c, giveBack: true, freed: now, group: g.name, landed: func() {
			r.drains.forget(n.Name)
			drainTimeouts.WithLabelValues(g.name).Inc()
			msg := fmt.Sprintf("Drain of node %s did not finish within %ds: %v; uncordoned, retrying after %s",
				n.Name, g.spec.Drain.TimeoutSeconds, res.err, retryAt.UTC().Format(time.RFC3339))
			r.drainOutcome[g.name] = drainOutcome{node: n.Name, blocked: msg}
			r.event(c, g, corev1.EventTypeWarning, EventDrainTimedOut, "Drain", "%s", msg)
		}}
	}
}

// withdraw undoes an approval whose request was withdrawn (needed removed
// or set to false, e.g. by `kubectl kubext reboot cancel`) before the
// reboot was ordered: the drain stops, the slot is given back, the node is
// uncordoned if kubext cordoned it. Pods already evicted stay where they
// were rescheduled. Once ordered, a reboot cannot be called back (the agent
// may be rebooting the machine): it is verified as usual.
func (r *Reconciler) withdraw(n *corev1.Node, g group, now time.Time) *nodeWrite {
	r.drains.forget(n.Name)
	c := n.DeepCopy()
	release(c)
	delete(c.Annotations, rebootv1.AnnotationNeededSince)
	return &nodeWrite{orig: n, changed: c, giveBack: true, freed: now, group: g.name, landed: func() {
		r.event(c, g, corev1.EventTypeNormal, EventCancelled, "Cancel",
			"Reboot request for node %s withdrawn before the reboot was ordered: drain stopped, slot given back, node uncordoned if kubext had cordoned it", n.Name)
	}}
}

// release takes a node out of its reboot before it was ordered: the slot is
// given back and the node uncordoned if kubext cordoned it.
func release(n *corev1.Node) {
	if _, ours := n.Annotations[rebootv1.AnnotationCordonedByUs]; ours {
		n.Spec.Unschedulable = false
	}
	for _, k := range []string{rebootv1.AnnotationInProgress, rebootv1.AnnotationBootID,
		rebootv1.AnnotationCordonedByUs, rebootv1.AnnotationNow} {
		delete(n.Annotations, k)
	}
}

// verifyStep waits for an ordered reboot to show: a new boot ID and the node
// Ready for the soak time. Then the reboot is done; a reboot that takes
// longer than the group's timeout is marked failed but keeps its slot.
func (r *Reconciler) verifyStep(n *corev1.Node, g group, now time.Time, next *deadlines) *nodeWrite {
	ordered, ok := annotationTime(n, rebootv1.AnnotationNow)
	if !ok {
		ordered = now // unparsable: measure from now rather than never
	}
	oldBoot := n.Annotations[rebootv1.AnnotationBootID]
	newBoot := n.Status.NodeInfo.BootID
	if since := readySince(n); newBoot != oldBoot && !since.IsZero() {
		soakEnd := r.backSince(n, since, now)
		if ordered.After(soakEnd) {
			soakEnd = ordered
		}
		soakEnd = soakEnd.Add(soak(g.spec))
		if now.Before(soakEnd) {
			next.at(soakEnd)
			return nil
		}
		w := r.complete(n, g, now, oldBoot, newBoot)
		w.freed = soakEnd
		return w
	}
	timeout := rebootTimeout(g.spec)
	if now.Sub(ordered) <= timeout {
		next.at(ordered.Add(timeout + time.Millisecond))
		return nil
	}
	if _, marked := n.Annotations[rebootv1.AnnotationFailed]; marked {
		return nil
	}
	why := "boot ID unchanged"
	if newBoot != oldBoot {
		why = "node not Ready"
	}
	c := n.DeepCopy()
	c.Annotations[rebootv1.AnnotationFailed] = fmt.Sprintf("reboot ordered at %s did not complete within %s (%s)",
		ordered.UTC().Format(time.RFC3339), timeout, why)
	return &nodeWrite{orig: n, changed: c, landed: func() {
		r.event(c, g, corev1.EventTypeWarning, EventStuck, "Verify", "Node %s: %s; it keeps its slot until it comes back",
			n.Name, c.Annotations[rebootv1.AnnotationFailed])
	}}
}

// backSince is when the node came back: the moment this controller's watch
// saw it turn Ready with its new boot ID (sightings), or else the moment a
// reconcile first saw it so, or, when neither did (it just took over), the
// Ready condition's transition time, which is stored to the second:
// rounded up so that the soak is never cut short. A moment before the
// Ready condition's transition is from before the node last went NotReady
// and does not count.
func (r *Reconciler) backSince(n *corev1.Node, readySince, now time.Time) time.Time {
	key := backKey(n)
	if t, ok := r.sightings.get(key); ok && !t.Before(readySince) {
		return t
	}
	if t, ok := r.back[key]; ok && !t.Before(readySince) {
		return t
	}
	if readySince.Nanosecond() == 0 {
		readySince = readySince.Add(time.Second)
	}
	if now.Sub(readySince) < 2*time.Second {
		// Seen within moments of it happening: what we saw is closer.
		r.back[key] = now
		return now
	}
	r.back[key] = readySince
	return readySince
}

// backKey keys what is remembered of a node's return by its approval.
func backKey(n *corev1.Node) string {
	return n.Name + "/" + n.Annotations[rebootv1.AnnotationInProgress]
}

// sightings are the moments the node watch delivered an ordered node Ready
// in a new boot, by node and approval. The soak counts from there rather
// than from the reconcile that next looks: on a large cluster the single
// worker is often busy when the node comes back, and every millisecond it
// is would be added to the soak.
type sightings struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// note records what a node event shows: an ordered node Ready with a boot
// ID other than the one its reboot replaces is back (the first moment
// counts); one not Ready is not (a later return counts from then).
func (s *sightings) note(n *corev1.Node, now time.Time) {
	if _, ordered := n.Annotations[rebootv1.AnnotationNow]; !ordered {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]time.Time{}
	}
	key := backKey(n)
	back := !readySince(n).IsZero() && n.Status.NodeInfo.BootID != n.Annotations[rebootv1.AnnotationBootID]
	if _, noted := s.seen[key]; back && !noted {
		s.seen[key] = now
	} else if !back {
		delete(s.seen, key)
	}
}

func (s *sightings) get(key string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.seen[key]
	return t, ok
}

// forgetAllBut drops the sightings of nodes that hold no slot.
func (s *sightings) forgetAllBut(holders map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key := range s.seen {
		if node, _, _ := strings.Cut(key, "/"); !holders[node] {
			delete(s.seen, key)
		}
	}
}

// complete ends a verified reboot: uncordon if kubext cordoned, record the
// time (rebooted-at: what the ledger's repair knows a completed reboot by),
// clear the protocol's annotations. The slot is given back once this has
// landed, with the reconcile's next ledger write.
func (r *Reconciler) complete(n *corev1.Node, g group, now time.Time, oldBoot, newBoot string) *nodeWrite {
	c := n.DeepCopy()
	release(c)
	for _, k := range []string{rebootv1.AnnotationNeeded, rebootv1.AnnotationNeededSince,
		rebootv1.AnnotationFailed, rebootv1.AnnotationRetryAfter} {
		delete(c.Annotations, k)
	}
	c.Annotations[rebootv1.AnnotationRebootedAt] = stamp(now)
	return &nodeWrite{orig: n, changed: c, thenGiveBack: true, group: g.name, landed: func() {
		r.drains.reset(n.Name)
		delete(r.back, backKey(n))
		if approved, ok := annotationTime(n, rebootv1.AnnotationInProgress); ok {
			rebootSeconds.Observe(now.Sub(approved).Seconds())
		}
		verified.WithLabelValues(g.name).Inc()
		r.event(c, g, corev1.EventTypeNormal, EventVerified, "Verify",
			"Reboot of node %s verified (boot ID %s -> %s, Ready for %s); slot freed", n.Name, short(oldBoot), short(newBoot), soak(g.spec))
	}}
}

func rebootTimeout(spec rebootv1.RebootGroupSpec) time.Duration {
	if spec.RebootTimeoutSeconds > 0 {
		return time.Duration(spec.RebootTimeoutSeconds) * time.Second
	}
	return rebootplan.DefaultRebootTimeout
}

// timeoutSeconds is rebootTimeout as a slot records it.
func timeoutSeconds(spec rebootv1.RebootGroupSpec) int32 {
	return int32(rebootTimeout(spec) / time.Second)
}

// soak is how long a rebooted node must stay Ready; unset is the CRD's
// default.
func soak(spec rebootv1.RebootGroupSpec) time.Duration {
	if spec.SoakSeconds == nil {
		return 60 * time.Second
	}
	return time.Duration(*spec.SoakSeconds) * time.Second
}

func short(bootID string) string {
	if len(bootID) > 8 {
		return bootID[:8]
	}
	return bootID
}

// event records an Event on the node and, for a group that exists as an
// object, what needs a look (a warning) or was asked by someone (a cancel)
// on the group too. A node's routine steps (approved, drained, verified)
// are told on the node only: copied to the group they were three Events
// per node per rollout, thousands in a large group's `kubectl describe`,
// where the group's own rollout Events and `kubectl kubext reboot status`
// tell its progress, and half the writes a rollout cost the API server
// beside the node patches (docs/benchmarks.md, "1,000 nodes").
func (r *Reconciler) event(n *corev1.Node, g group, typ, reason, action, format string, args ...any) {
	r.Recorder.Eventf(n, nil, typ, reason, action, format, args...)
	if g.object != nil && (typ == corev1.EventTypeWarning || reason == EventCancelled) {
		var related runtime.Object = n
		r.Recorder.Eventf(g.object, related, typ, reason, action, format, args...)
	}
}

// deadlines collects the earliest moment something is due without any
// watch event announcing it (a soak ending, a reboot timing out, a retry or
// a window opening).
type deadlines struct {
	now  time.Time
	next time.Time
}

func newDeadlines(now time.Time) *deadlines { return &deadlines{now: now} }

func (d *deadlines) at(t time.Time) {
	if t.After(d.now) && (d.next.IsZero() || t.Before(d.next)) {
		d.next = t
	}
}

// after is how long to wait, from now (the end of the reconcile, not its
// start: a reconcile of a large cluster takes a good part of a second, and
// a soak ending meanwhile must not wait that much longer), until the
// earliest deadline, at most limit.
func (d *deadlines) after(now time.Time, limit time.Duration) time.Duration {
	if d.next.IsZero() || d.next.Sub(now) > limit {
		return limit
	}
	// A few milliseconds late rather than early: timestamps are compared
	// with the controller's clock. A deadline passed during the reconcile
	// is looked at again at once (zero would mean no requeue at all).
	return max(d.next.Sub(now), 0) + 5*time.Millisecond
}
