package reboot

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// A node that carries only kubeadm's control-plane taint (no role label,
// as some installers leave it) is a control-plane node: with room in the
// budget for all three, the worker still goes first, then the two
// control-plane nodes one at a time. Before taints counted, all three were
// approved together.
func TestControlPlaneByTaint(t *testing.T) {
	g := makeGroup(t, "cptaint", intstr.FromInt32(5), nil)
	taint := func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: rebootv1.LabelControlPlane, Effect: corev1.TaintEffectNoSchedule}}
	}
	makeNode(t, g.Name, "cptaint-cp0", taint)
	makeNode(t, g.Name, "cptaint-cp1", taint)
	makeNode(t, g.Name, "cptaint-w", nil)
	rollOutControlPlaneLast(t, g.Name, []string{"cptaint-cp0", "cptaint-cp1"}, []string{"cptaint-w"})
}

// A group's controlPlaneSelector makes the nodes it selects control-plane
// nodes (e.g. a distribution's etcd nodes, neither labelled nor tainted by
// role), and the ledger's slot says so.
func TestControlPlaneBySelector(t *testing.T) {
	g := makeGroup(t, "cpsel", intstr.FromInt32(5), func(s *rebootv1.RebootGroupSpec) {
		s.ControlPlaneSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"example.com/etcd": "true"}}
	})
	etcd := func(n *corev1.Node) { n.Labels["example.com/etcd"] = "true" }
	makeNode(t, g.Name, "cpsel-e0", etcd)
	makeNode(t, g.Name, "cpsel-e1", etcd)
	makeNode(t, g.Name, "cpsel-w", nil)
	rollOutControlPlaneLast(t, g.Name, []string{"cpsel-e0", "cpsel-e1"}, []string{"cpsel-w"})
}

// rollOutControlPlaneLast asks for a reboot of every node, control-plane
// nodes first in line, and watches the rollout to its end through the
// approvals ledger (one read is one moment's slots): never a control-plane
// node holding a slot together with a worker or another control-plane
// node, nor before every worker is done; every slot of a control-plane
// node marked so.
func rollOutControlPlaneLast(t *testing.T, group string, cps, workers []string) {
	t.Helper()
	ctx := context.Background()
	startAgents(t, group, 200*time.Millisecond)
	// Every node eligible before any asks: a worker whose heartbeat the
	// controller has not seen yet waits (rightly), and the control-plane
	// nodes would go first (CI saw it under -race).
	all := append(slices.Clone(cps), workers...)
	eventuallyWithin(t, waitFor, "every agent's heartbeat seen by the controller", func() (bool, error) {
		return !slices.ContainsFunc(all, func(n string) bool { return !agentHealth.Healthy(n) }), nil
	})
	// The control-plane nodes have waited longest: were they workers, they
	// would go first. The workers ask first, so that no decision sees the
	// control-plane nodes asking alone (they would rightly go then).
	for i := len(all) - 1; i >= 0; i-- {
		annotate(t, all[i], rebootv1.AnnotationNeeded, "true",
			rebootv1.AnnotationNeededSince, stamp(time.Now().Add(-time.Hour+time.Duration(i)*time.Minute)))
	}
	eventuallyWithin(t, 2*waitFor, "every node rebooted", func() (bool, error) {
		slots, err := ledgerSlots(ctx)
		if err != nil {
			return false, err
		}
		var cpHolding, workerHolding []string
		for name, sl := range slots {
			switch {
			case slices.Contains(cps, name):
				cpHolding = append(cpHolding, name)
				if !sl.ControlPlane {
					t.Fatalf("the ledger's slot of %s does not say it is a control-plane node: %+v", name, sl)
				}
			case slices.Contains(workers, name):
				workerHolding = append(workerHolding, name)
				if sl.ControlPlane {
					t.Fatalf("the ledger's slot of worker %s says control-plane: %+v", name, sl)
				}
			}
		}
		if len(cpHolding) > 1 || len(cpHolding) > 0 && len(workerHolding) > 0 {
			t.Fatalf("holding slots together: control-plane %v, workers %v", cpHolding, workerHolding)
		}
		// Read after the ledger: a worker not done now was not done when
		// the control-plane node held its slot.
		done := 0
		for _, name := range all {
			if protocolDone(getNode(t, name)) {
				done++
			} else if len(cpHolding) > 0 && slices.Contains(workers, name) {
				t.Fatalf("control-plane node %v approved before worker %s was done", cpHolding, name)
			}
		}
		return done == len(all), nil
	})
}
