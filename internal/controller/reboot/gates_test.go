package reboot

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootplan"
)

// A group whose readyPods gate selects a pod that is not Ready approves
// nothing: its node waits (an Event names the gate), the group's GateHeld
// condition says which pods, and once the pod is Ready the node reboots.
// Without the gate the node was approved at once.
func TestReadyPodsGateHoldsUntilPodsAreReady(t *testing.T) {
	g := makeGroup(t, "gready", intstr.FromInt32(1), func(s *rebootv1.RebootGroupSpec) {
		s.HealthGates = &rebootv1.HealthGates{ReadyPods: &rebootv1.PodsGate{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"gate": "gready"}}}}
	})
	makeNode(t, g.Name, "gready-0", nil)
	startAgents(t, g.Name, 0)
	pod := gatePod(t, "default", "", "gready-db", map[string]string{"gate": "gready"}, "00000000-0000-0000-0000-0000000000a1", false)

	annotate(t, "gready-0", rebootv1.AnnotationNeeded, "true")
	expectHeld(t, g, "gready-0", rebootv1.ReasonSelectedPodsNotReady, "default/gready-db")

	setPodReady(t, pod, true)
	eventually(t, "gready-0 rebooted once the pod is Ready", func() (bool, error) { return protocolDone(getNode(t, "gready-0")), nil })
	expectGateCondition(t, g, metav1.ConditionFalse, rebootv1.ReasonGatesPass)
}

// A group whose podDisruptionBudgets gate selects a namespace with a
// budget that allows no disruption waits until it allows one; a budget at
// zero in a namespace the gate does not select holds nothing.
func TestPodDisruptionBudgetGateHoldsUntilDisruptionsAreAllowed(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gate-pdb", Labels: map[string]string{"reboot-gate": "watched"}}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	watched := gatePDB(t, "gate-pdb", "tight", 0)
	gatePDB(t, "default", "elsewhere", 0) // not selected: never holds

	g := makeGroup(t, "gpdb", intstr.FromInt32(1), func(s *rebootv1.RebootGroupSpec) {
		s.HealthGates = &rebootv1.HealthGates{PodDisruptionBudgets: &rebootv1.NamespacesGate{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"reboot-gate": "watched"}}}}
	})
	makeNode(t, g.Name, "gpdb-0", nil)
	startAgents(t, g.Name, 0)
	annotate(t, "gpdb-0", rebootv1.AnnotationNeeded, "true")
	expectHeld(t, g, "gpdb-0", rebootv1.ReasonDisruptionsNotAllowed, "gate-pdb/tight")
	if c := gateCondition(t, g); c != nil && containsAll(c.Message, "default/elsewhere") {
		t.Errorf("the gate names a budget of a namespace it does not select: %s", c.Message)
	}

	setPDBAllowed(t, watched, 1)
	eventually(t, "gpdb-0 rebooted once the budget allows a disruption", func() (bool, error) {
		return protocolDone(getNode(t, "gpdb-0")), nil
	})
}

// After a drain, the next node of a group with evictedPodsReady waits
// until every pod of the workloads the drain evicted pods of is Ready: the
// group's status records the drain (node and workloads), the second node
// is held while the workload's other pod is not Ready, and goes once it
// is. Without the gate the second node went as soon as the first was
// verified.
func TestEvictedPodsReadyGateHoldsTheNextNode(t *testing.T) {
	ctx := context.Background()
	const owner = "00000000-0000-0000-0000-0000000000b1"
	g := makeGroup(t, "gevict", intstr.FromInt32(1), func(s *rebootv1.RebootGroupSpec) {
		s.Drain.GracePeriodSeconds = ptr.To[int64](0) // no kubelet here to finish a graceful deletion
		s.HealthGates = &rebootv1.HealthGates{EvictedPodsReady: true}
	})
	makeNode(t, g.Name, "gevict-0", nil)
	makeNode(t, g.Name, "gevict-1", nil)
	startAgents(t, g.Name, 0)
	// The workload's pod on the first node, Ready, and its other pod,
	// not scheduled yet (its replacement, as far as the gate can tell).
	gatePod(t, "default", "gevict-0", "web-a", map[string]string{"app": "gevict-web"}, owner, true)
	pending := gatePod(t, "default", "", "web-b", map[string]string{"app": "gevict-web"}, owner, false)

	annotate(t, "gevict-0", rebootv1.AnnotationNeeded, "true", rebootv1.AnnotationNeededSince, stamp(time.Now().Add(-time.Hour)))
	annotate(t, "gevict-1", rebootv1.AnnotationNeeded, "true")
	eventually(t, "gevict-0 rebooted", func() (bool, error) { return protocolDone(getNode(t, "gevict-0")), nil })
	expectHeld(t, g, "gevict-1", rebootv1.ReasonEvictedPodsNotReady, "default/web-b")

	got := &rebootv1.RebootGroup{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(g), got); err != nil {
		t.Fatal(err)
	}
	if d := got.Status.LastDrain; d == nil || d.Node != "gevict-0" || len(d.Workloads) != 1 || d.Workloads[0].UID != owner {
		t.Fatalf("status.lastDrain = %+v, want node gevict-0 and the workload %s", d, owner)
	}

	setPodReady(t, pending, true)
	eventually(t, "gevict-1 rebooted once the evicted workload is Ready", func() (bool, error) {
		return protocolDone(getNode(t, "gevict-1")), nil
	})
}

// expectHeld waits for the node to be told a health gate holds it, checks
// the group's GateHeld condition, and that the node stays unapproved for a
// while (longer than the controller takes to look at the gate again).
func expectHeld(t *testing.T, g *rebootv1.RebootGroup, node, reason, names string) {
	t.Helper()
	eventually(t, node+" held by a health gate", hasEvent(t, node, string(rebootplan.ReasonHealthGate), reason))
	eventually(t, "GateHeld on the group", func() (bool, error) {
		c := gateCondition(t, g)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason && containsAll(c.Message, names), nil
	})
	deadline := time.Now().Add(gateRecheck + time.Second)
	for time.Now().Before(deadline) {
		if _, approved := getNode(t, node).Annotations[rebootv1.AnnotationInProgress]; approved {
			t.Fatalf("%s approved while the gate (%s) holds", node, reason)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func expectGateCondition(t *testing.T, g *rebootv1.RebootGroup, status metav1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, "GateHeld "+string(status), func() (bool, error) {
		c := gateCondition(t, g)
		return c != nil && c.Status == status && c.Reason == reason, nil
	})
}

func gateCondition(t *testing.T, g *rebootv1.RebootGroup) *metav1.Condition {
	t.Helper()
	got := &rebootv1.RebootGroup{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(g), got); err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(got.Status.Conditions, rebootv1.ConditionGateHeld)
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// gatePod creates a running pod controlled by the workload with UID owner,
// on node ("" leaves it unscheduled), Ready or not.
func gatePod(t *testing.T, ns, node, name string, labels map[string]string, owner string, ready bool) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-rs",
				UID: types.UID(owner), Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.com/c:1"}}},
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	setPodReady(t, pod, ready)
	return pod
}

// setPodReady writes the pod's phase Running and its Ready condition, as
// a kubelet would.
func setPodReady(t *testing.T, pod *corev1.Pod, ready bool) {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	patch := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}}
	orig := patch.DeepCopy()
	patch.Status.Phase = corev1.PodRunning
	patch.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	if err := k8s.Status().Patch(context.Background(), patch, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

// gatePDB creates a PodDisruptionBudget whose status (no disruption
// controller runs here) allows the given number of disruptions.
func gatePDB(t *testing.T, ns, name string, allowed int32) *policyv1.PodDisruptionBudget {
	t.Helper()
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		},
	}
	if err := k8s.Create(context.Background(), pdb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pdb) })
	setPDBAllowed(t, pdb, allowed)
	return pdb
}

func setPDBAllowed(t *testing.T, pdb *policyv1.PodDisruptionBudget, allowed int32) {
	t.Helper()
	ctx := context.Background()
	cur := &policyv1.PodDisruptionBudget{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pdb), cur); err != nil {
		t.Fatal(err)
	}
	orig := cur.DeepCopy()
	cur.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: cur.Generation, DisruptionsAllowed: allowed,
		CurrentHealthy: 1 + allowed, DesiredHealthy: 1, ExpectedPods: 1 + allowed}
	if err := k8s.Status().Patch(ctx, cur, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}
