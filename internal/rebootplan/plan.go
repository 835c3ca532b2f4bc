package rebootplan

import (
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// Batch is a set of nodes that Plan expects to be approved together.
type Batch struct {
	// NotBefore is the earliest the batch can start: the snapshot's time, or
	// the opening of the maintenance window it waits for.
	NotBefore time.Time
	// Nodes are the nodes of the batch in approval order, with their group.
	Nodes []PlannedNode
}

// PlannedNode is one node of a Batch.
type PlannedNode struct {
	Name  string
	Group string
}

// Plan is a dry run of the whole rollout: it applies Decide over and over,
// assuming every approved or rebooting node reboots successfully and comes
// back Ready before the next batch, and waiting for the next maintenance
// window whenever nothing else can move. It returns the batches in order and
// the needing nodes that would never be approved, with the reason (e.g.
// paused, halted, stuck nodes holding the budget, overlapping groups, a
// health gate that holds the group now: when it will pass cannot be
// foreseen, so its nodes are shown blocked by it). The snapshot is not
// modified.
func Plan(s Snapshot) ([]Batch, []Wait) {
	nodes := make([]Node, len(s.Nodes))
	for i, n := range s.Nodes {
		n.Annotations = maps.Clone(n.Annotations)
		nodes[i] = n
	}
	sim := Snapshot{Groups: s.Groups, Nodes: nodes, Held: s.Held, Now: s.Now}
	var batches []Batch
	for range 2*len(nodes) + 16 {
		d := Decide(sim)
		stuck := map[string]bool{}
		for _, g := range d.Groups {
			for _, n := range g.Stuck {
				stuck[n] = true
			}
		}
		approved := map[string]string{}
		for _, g := range d.Groups {
			for _, n := range g.Approved {
				approved[n] = g.Name
			}
		}
		if len(d.Approved) > 0 {
			b := Batch{NotBefore: sim.Now}
			for _, g := range d.Groups {
				for _, n := range g.Approved {
					b.Nodes = append(b.Nodes, PlannedNode{Name: n, Group: g.Name})
				}
			}
			batches = append(batches, b)
		}
		finished := 0
		for i := range sim.Nodes {
			n := &sim.Nodes[i]
			if _, ok := approved[n.Name]; ok || n.HoldsSlot() && !stuck[n.Name] {
				complete(n, sim.Now)
				finished++
			}
		}
		if finished > 0 {
			continue
		}
		// Nothing moved: wait for the next window if that is what blocks.
		next := time.Time{}
		for _, w := range d.Waiting() {
			if g := d.Group(w.Group); w.Reason == ReasonOutsideWindow && !g.NextWindow.IsZero() && (next.IsZero() || g.NextWindow.Before(next)) {
				next = g.NextWindow
			}
		}
		if next.IsZero() || !next.After(sim.Now) {
			return batches, d.Waiting()
		}
		sim.Now = next
	}
	return batches, Decide(sim).Waiting()
}

// complete makes n look as the controller leaves a node after a verified
// reboot.
func complete(n *Node, now time.Time) {
	if _, ok := n.Annotations[rebootv1.AnnotationCordonedByUs]; ok {
		n.Unschedulable = false
	}
	for _, a := range []string{
		rebootv1.AnnotationNeeded, rebootv1.AnnotationNeededSince, rebootv1.AnnotationInProgress,
		rebootv1.AnnotationNow, rebootv1.AnnotationBootID, rebootv1.AnnotationCordonedByUs,
		rebootv1.AnnotationRetryAfter,
	} {
		delete(n.Annotations, a)
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[rebootv1.AnnotationRebootedAt] = now.UTC().Format(time.RFC3339)
	n.Ready = corev1.ConditionTrue
	n.Reserved = false
}
