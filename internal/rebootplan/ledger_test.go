package rebootplan

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// Slots the approvals ledger holds count like slots the nodes show.
func TestLedgerSlotsCountAgainstTheBudget(t *testing.T) {
	reserved := func(n *Node) { n.Reserved = true }
	for _, tc := range []struct {
		name string
		snap Snapshot
	}{
		{"a grant whose node patch has not landed", Snapshot{Nodes: []Node{
			node("a", needing, reserved), node("b", needing, since(time.Hour)),
		}}},
		{"a node deleted while it reboots", Snapshot{Nodes: []Node{node("b", needing)},
			Absent: []Absent{{Node: "gone", Group: "default"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.snap.Now = now
			d := Decide(tc.snap)
			if len(d.Approved) != 0 {
				t.Fatalf("approved %v with the only slot held", d.Approved)
			}
			if w := d.Waiting(); len(w) != 1 || w[0].Node != "b" || w[0].Reason != ReasonMaxUnavailable {
				t.Fatalf("waiting = %+v, want b waiting for MaxUnavailable", w)
			}
		})
	}
}

// An absent control-plane node keeps the other control-plane nodes and
// the workers waiting, as a present one would.
func TestAbsentControlPlaneNodeHoldsTheControlPlane(t *testing.T) {
	// Budget 3: only the control-plane rules can hold cp-2 and w back.
	groups := []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(3)))}
	d := Decide(Snapshot{Now: now, Groups: groups,
		Nodes:  []Node{node("cp-2", needing, controlPlane), node("w", needing)},
		Absent: []Absent{{Node: "cp-1", Group: "default", ControlPlane: true}}})
	if len(d.Approved) != 0 {
		t.Fatalf("approved %v while control-plane node cp-1 may still be down", d.Approved)
	}
	reasons := map[string]Reason{}
	for _, w := range d.Waiting() {
		reasons[w.Node] = w.Reason
	}
	if reasons["cp-2"] != ReasonControlPlaneBusy || reasons["w"] != ReasonWorkerWaits {
		t.Fatalf("waiting = %v, want cp-2 %s and w %s", reasons, ReasonControlPlaneBusy, ReasonWorkerWaits)
	}
}

// A node without a boot ID is never approved: its reboot could not be
// verified, so it would be drained for nothing and end up stuck.
func TestNodeWithoutBootIDWaits(t *testing.T) {
	noBoot := func(n *Node) { n.BootID = "" }
	d := Decide(Snapshot{Now: now, Nodes: []Node{node("a", needing, noBoot)}})
	if len(d.Approved) != 0 {
		t.Fatalf("approved %v", d.Approved)
	}
	if w := d.Waiting(); len(w) != 1 || w[0].Reason != ReasonNoBootID {
		t.Fatalf("waiting = %+v, want NoBootID", w)
	}
}
