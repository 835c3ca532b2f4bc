package rebootplan

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// world is a group's nodes moved on as the controller and agents would:
// approved nodes take a slot, slot holders complete their reboot.
type world struct {
	t       *testing.T
	groups  []rebootv1.RebootGroup
	nodes   []Node
	held    map[string]Hold
	absent  []Absent
	rollout *rebootv1.RolloutStatus
	reboots map[string]int
}

func (w *world) nodeMap() map[string]Node {
	m := map[string]Node{}
	for _, n := range w.nodes {
		m[n.Name] = n
	}
	return m
}

// look decides at t, tracks the rollout and approves what was approved.
func (w *world) look(t time.Time) Decision {
	d := Decide(Snapshot{Groups: w.groups, Nodes: w.nodes, Held: w.held, Absent: w.absent, Now: t})
	w.rollout = Track(w.rollout, d.Group("w"), w.nodeMap(), t)
	for i := range w.nodes {
		if slices.Contains(d.Approved, w.nodes[i].Name) {
			w.nodes[i].Annotations[rebootv1.AnnotationInProgress] = t.Format(time.RFC3339)
		}
	}
	return d
}

// finish completes the reboots under way at t.
func (w *world) finish(t time.Time) {
	for i := range w.nodes {
		if w.nodes[i].HoldsSlot() {
			complete(&w.nodes[i], t)
			w.reboots[w.nodes[i].Name]++
		}
	}
}

func (w *world) expect(state rebootv1.RolloutState, number int64, done, remaining, failed int32) {
	w.t.Helper()
	r := w.rollout
	if r == nil {
		w.t.Fatalf("no rollout, want %s", state)
	}
	if r.State != state || r.Number != number || r.Done != done || r.Remaining != remaining || r.Failed != failed ||
		r.Total != done+remaining+failed || int(r.Remaining) != len(r.RemainingNodes) || int(r.Failed) != len(r.FailedNodes) {
		w.t.Fatalf("rollout %+v, want #%d %s done %d remaining %d failed %d", *r, number, state, done, remaining, failed)
	}
}

func newWorld(t *testing.T, names ...string) *world {
	w := &world{t: t, reboots: map[string]int{},
		groups: []rebootv1.RebootGroup{rg("w", selecting("pool", "w"), maxUnavailable(intstr.FromInt32(1)),
			windows(rebootv1.MaintenanceWindow{Start: "12:00", End: "12:30", TimeZone: "UTC"}))}}
	for i, name := range names {
		// Asked in the order given: the order they are approved in.
		w.nodes = append(w.nodes, node(name, label("pool", "w"), needing, since(time.Duration(len(names)-i)*time.Hour)))
	}
	return w
}

// A rollout of four nodes whose window closes after three reboots (the
// third was approved inside it and finishes after) waits, says until when,
// and goes on with the fourth node only at the next window; no node is
// rebooted twice, and the record changes only when something happens.
func TestTrackRolloutAcrossWindows(t *testing.T) {
	w := newWorld(t, "a", "b", "c", "d")
	if got := Track(nil, &GroupDecision{Name: "w"}, nil, now); got != nil {
		t.Fatalf("a rollout with no node asking: %+v", got)
	}
	w.look(now)
	w.expect(rebootv1.RolloutRunning, 1, 0, 4, 0)
	if !w.rollout.StartTime.Time.Equal(now) || w.rollout.Message != "Rebooting: a" {
		t.Fatalf("started %s, message %q", w.rollout.StartTime, w.rollout.Message)
	}
	for _, at := range []time.Duration{5 * time.Minute, 10 * time.Minute} {
		w.finish(now.Add(at))
		w.look(now.Add(at))
	}
	w.expect(rebootv1.RolloutRunning, 1, 2, 2, 0)

	closed := now.Add(31 * time.Minute)
	w.look(closed) // c, approved in the window, is still rebooting
	w.expect(rebootv1.RolloutRunning, 1, 2, 2, 0)
	w.finish(closed)
	if d := w.look(closed); len(d.Approved) != 0 {
		t.Fatalf("approved %v outside the window", d.Approved)
	}
	w.expect(rebootv1.RolloutWaitingForWindow, 1, 3, 1, 0)
	next := now.Add(24 * time.Hour)
	if r := w.rollout; r.ResumeAt == nil || !r.ResumeAt.Time.Equal(next) || r.WaitingSince == nil || !r.WaitingSince.Time.Equal(closed) ||
		!slices.Equal(r.RemainingNodes, []string{"d"}) {
		t.Fatalf("waiting: %+v", *r)
	}
	waiting := w.rollout
	w.look(closed.Add(time.Hour))
	if w.rollout != waiting {
		t.Fatalf("the record changed while nothing happened: %+v", *w.rollout)
	}

	w.look(next)
	w.expect(rebootv1.RolloutRunning, 1, 3, 1, 0)
	if w.rollout.WaitingSince != nil || w.rollout.ResumeAt != nil {
		t.Fatalf("still waiting once resumed: %+v", *w.rollout)
	}
	w.finish(next.Add(time.Minute))
	w.look(next.Add(time.Minute))
	w.expect(rebootv1.RolloutComplete, 1, 4, 0, 0)
	if c := w.rollout.CompletionTime; c == nil || !c.Time.Equal(next.Add(time.Minute)) {
		t.Fatalf("completion time %v", c)
	}
	for _, n := range []string{"a", "b", "c", "d"} {
		if w.reboots[n] != 1 {
			t.Fatalf("reboots %v, want one each", w.reboots)
		}
	}
	complete := w.rollout
	w.look(next.Add(2 * time.Minute))
	if w.rollout != complete {
		t.Fatalf("a complete rollout changed with nothing asking: %+v", *w.rollout)
	}

	// A node asking after the rollout completed starts the next one.
	needing(&w.nodes[0])
	w.look(next.Add(3 * time.Minute))
	w.expect(rebootv1.RolloutRunning, 2, 0, 1, 0)
}

// Nodes join a running rollout when they ask, leave it when their request
// is withdrawn before their reboot, and a node that asks again after its
// reboot in the rollout is rebooted once more, counted in the total.
func TestTrackJoinsLeavesAndAsksAgain(t *testing.T) {
	w := newWorld(t, "a", "b", "c")
	w.nodes = append(w.nodes, node("late", label("pool", "w")))
	w.look(now)
	w.expect(rebootv1.RolloutRunning, 1, 0, 3, 0)

	delete(w.nodes[1].Annotations, rebootv1.AnnotationNeeded) // b withdraws
	needing(&w.nodes[3])                                      // late asks
	w.finish(now.Add(time.Minute))                            // a is done
	w.look(now.Add(time.Minute))
	w.expect(rebootv1.RolloutRunning, 1, 1, 2, 0)
	if !slices.Equal(w.rollout.RemainingNodes, []string{"c", "late"}) {
		t.Fatalf("remaining %v", w.rollout.RemainingNodes)
	}

	needing(&w.nodes[0]) // a asks again after its reboot
	w.look(now.Add(2 * time.Minute))
	w.expect(rebootv1.RolloutRunning, 1, 1, 3, 0)
}

// A failed reboot is counted as failed, halts the group (maxFailures 1),
// and a rollout with nothing left but failed nodes is complete; failed
// nodes alone start no new rollout.
func TestTrackFailedNodes(t *testing.T) {
	w := newWorld(t, "a", "b")
	w.look(now)
	failed(&w.nodes[0])
	w.look(now.Add(time.Minute))
	w.expect(rebootv1.RolloutHalted, 1, 0, 1, 1)

	delete(w.nodes[1].Annotations, rebootv1.AnnotationNeeded)
	complete(&w.nodes[0], now.Add(2*time.Minute))
	w.nodes[0].Annotations[rebootv1.AnnotationNeeded] = "true"
	failed(&w.nodes[0])
	w.look(now.Add(2 * time.Minute))
	w.expect(rebootv1.RolloutComplete, 1, 0, 0, 1)
	done := w.rollout
	w.look(now.Add(3 * time.Minute))
	if w.rollout != done {
		t.Fatalf("a failed node alone started rollout %+v", *w.rollout)
	}
}

// Pause and a health gate stop a rollout with nothing under way, and say
// so; the time it stopped is kept while it stays stopped.
func TestTrackPausedAndGated(t *testing.T) {
	w := newWorld(t, "a")
	w.held = map[string]Hold{"w": {Reason: rebootv1.ReasonSelectedPodsNotReady, Message: "db-0 is not Ready"}}
	w.look(now)
	w.expect(rebootv1.RolloutGated, 1, 0, 1, 0)
	if w.rollout.Message != "SelectedPodsNotReady: db-0 is not Ready" || !w.rollout.WaitingSince.Time.Equal(now) {
		t.Fatalf("gated: %+v", *w.rollout)
	}
	w.groups[0].Spec.Paused = true
	w.look(now.Add(time.Minute))
	w.expect(rebootv1.RolloutPaused, 1, 0, 1, 0)
	w.look(now.Add(2 * time.Minute))
	if !w.rollout.WaitingSince.Time.Equal(now.Add(time.Minute)) {
		t.Fatalf("paused since %s, want when the pause was seen", w.rollout.WaitingSince)
	}
}

// A node deleted while it reboots keeps its place in the rollout, as
// rebooting, while its slot is held; it leaves when the slot is let go.
func TestTrackNodeDeletedWhileRebooting(t *testing.T) {
	w := newWorld(t, "a", "b")
	w.look(now)
	w.expect(rebootv1.RolloutRunning, 1, 0, 2, 0)
	w.nodes = w.nodes[1:]
	w.absent = []Absent{{Node: "a", Group: "w"}}
	w.look(now.Add(time.Minute))
	w.expect(rebootv1.RolloutRunning, 1, 0, 2, 0)
	if w.rollout.Message != "Rebooting: a" {
		t.Fatalf("message %q, want a rebooting", w.rollout.Message)
	}
	w.absent = nil
	w.look(now.Add(31 * time.Minute)) // out of the window: b waits
	w.expect(rebootv1.RolloutWaitingForWindow, 1, 0, 1, 0)
}
