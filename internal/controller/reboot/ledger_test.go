package reboot

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootplan"
	"github.com/kubext/kubext/test/testenv"
)

// rival is a reboot controller of its own, outside any manager and without
// leader election: what a second leader, or a paused ex-leader that
// resumes, is.
func rival(t *testing.T, env *testenv.Env, c client.Client) *Reconciler {
	t.Helper()
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: c, APIReader: c, Kube: kube, Recorder: &events.FakeRecorder{}, Now: time.Now, LedgerNamespace: "default", LedgerName: DefaultLedgerName}
	r.init(func() {})
	return r
}

// TestStalledLeaderCannotApprovePastTheBudget runs two controllers against
// one API server of their own (this package's shared one has a controller
// running already). Controller A decides to approve race-2 and stalls
// before writing; meanwhile race-1 asks too, having waited longer, and
// controller B approves it; then A resumes. Each write A makes is
// conditional on the node it approves, which nobody changed, so without
// the approvals ledger both nodes end up approved with maxUnavailable 1.
// With it, A's grant is refused and A decides again from a fresh read.
func TestStalledLeaderCannotApprovePastTheBudget(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	one := intstr.FromInt32(1)
	group := &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "race"}, Spec: rebootv1.RebootGroupSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "race"}}, MaxUnavailable: &one}}
	if err := c.Create(ctx, group); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"race-1", "race-2"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "race"}}}
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		n.Status = corev1.NodeStatus{
			NodeInfo:   corev1.NodeSystemInfo{BootID: "boot-" + name},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}},
		}
		if err := c.Status().Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	ask := func(name string, since time.Time) {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			rebootv1.AnnotationNeeded: "true", rebootv1.AnnotationNeededSince: since.UTC().Format(time.RFC3339)}}})
		if err := c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
	}
	ask("race-2", time.Now().Add(-time.Hour))

	a, b := rival(t, env, c), rival(t, env, c)
	stalled, resume := make(chan struct{}), make(chan struct{})
	a.beforeGrant = func() {
		a.beforeGrant = nil // stall once
		close(stalled)
		<-resume
	}
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Reconcile(ctx, rollout)
		aDone <- err
	}()
	select {
	case <-stalled:
	case err := <-aDone:
		t.Fatalf("controller A finished without deciding to approve race-2: %v", err)
	}

	ask("race-1", time.Now().Add(-2*time.Hour))
	if _, err := b.Reconcile(ctx, rollout); err != nil {
		t.Fatal(err)
	}
	if !approved(t, c, "race-1") {
		t.Fatal("controller B did not approve race-1, the node that waited longest")
	}
	close(resume)
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	// A decides again, as its requeue would make it; so does B.
	for _, r := range []*Reconciler{a, b, a} {
		if _, err := r.Reconcile(ctx, rollout); err != nil {
			t.Fatal(err)
		}
	}
	if approved(t, c, "race-2") {
		t.Fatal("race-2 approved too: two nodes unavailable with maxUnavailable 1")
	}
}

func approved(t *testing.T, c client.Client, name string) bool {
	t.Helper()
	n := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	_, ok := n.Annotations[rebootv1.AnnotationInProgress]
	return ok
}

// addLedgerSlot writes a slot into the ledger the package's controller
// uses, as a controller that crashed between its grant and its node patch
// would have left it.
func addLedgerSlot(t *testing.T, node string, sl slot) {
	t.Helper()
	eventually(t, "slot written to the ledger", func() (bool, error) {
		cm := &corev1.ConfigMap{}
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: DefaultLedgerName}, cm)
		if err != nil {
			return false, err
		}
		slots := map[string]slot{}
		if err := json.Unmarshal([]byte(cm.Data[ledgerKey]), &slots); err != nil {
			return false, err
		}
		slots[node] = sl
		data, _ := json.Marshal(slots)
		cm.Data[ledgerKey] = string(data)
		return k8s.Update(context.Background(), cm) == nil, nil
	})
	// The controller does not watch its ledger (it reads it on every
	// decision, and a restarted leader decides at once); wake it with a
	// change to a node of no interest.
	annotate(t, "repair-poke", "test.kubext.io/poke", time.Now().String())
}

// A grant whose node patch never landed is completed while the node is as
// it was granted, and dropped once the node changed (the granting patch can
// then never land): the slot is neither lost nor leaked. (Both grants here
// are for nodes that do not ask, as a forged or stray entry would be.)
func TestLedgerRepairsGrantsWithoutTheirNodePatch(t *testing.T) {
	g := makeGroup(t, "repair", intstr.FromInt32(1), nil)
	makeNode(t, g.Name, "repair-0", nil)
	makeNode(t, g.Name, "repair-1", nil)
	makeNode(t, "repair-poke", "repair-poke", nil)
	// Make sure the ledger exists: one reboot through it.
	startAgents(t, g.Name, 0)
	annotate(t, "repair-0", rebootv1.AnnotationNeeded, "true")
	eventually(t, "repair-0 rebooted", func() (bool, error) { return protocolDone(getNode(t, "repair-0")), nil })

	// A grant for repair-1 decided from its current version: completed.
	n := getNode(t, "repair-1")
	grantedAt := stamp(time.Now().Add(-time.Second))
	addLedgerSlot(t, "repair-1", slot{Group: g.Name, Approval: grantedAt, NodeResourceVersion: n.ResourceVersion})
	eventually(t, "the grant completed on repair-1", func() (bool, error) {
		return getNode(t, "repair-1").Annotations[rebootv1.AnnotationInProgress] == grantedAt, nil
	})
	// repair-1 never asked: the completed approval is then withdrawn like
	// any approval whose request is gone, and its slot given back.
	eventually(t, "the stray approval withdrawn and its slot given back", func() (bool, error) {
		slots, err := ledgerSlots(context.Background())
		_, held := slots["repair-1"]
		n := getNode(t, "repair-1")
		_, approved := n.Annotations[rebootv1.AnnotationInProgress]
		return !approved && !n.Spec.Unschedulable && !held, err
	})
	eventually(t, "an Event says so", hasEvent(t, "repair-1", EventCancelled, "withdrawn"))

	// A grant decided from a version the node no longer has: dropped, and
	// the node is not approved for it (it does not even ask).
	addLedgerSlot(t, "repair-0", slot{Group: g.Name, Approval: stamp(time.Now()), NodeResourceVersion: "1"})
	eventually(t, "the stale grant dropped", func() (bool, error) {
		slots, err := ledgerSlots(context.Background())
		_, held := slots["repair-0"]
		return !held, err
	})
	if _, ok := getNode(t, "repair-0").Annotations[rebootv1.AnnotationInProgress]; ok {
		t.Fatal("repair-0 approved from a stale grant")
	}
}

// Withdrawing the request (needed=false, as `kubectl kubext reboot
// cancel` writes) while the node drains undoes the approval: the drain
// stops, the node is uncordoned (kubext cordoned it), its annotations and
// its ledger slot are gone, and the next node gets the slot.
func TestWithdrawnRequestUndoesTheApproval(t *testing.T) {
	ctx := context.Background()
	g := makeGroup(t, "cancel", intstr.FromInt32(1), func(s *rebootv1.RebootGroupSpec) { s.Drain.TimeoutSeconds = 600 })
	makeNode(t, g.Name, "cancel-0", nil)
	makeNode(t, g.Name, "cancel-1", nil)
	startAgents(t, g.Name, 0)
	// A pod no disruption budget lets go keeps cancel-0 draining.
	runPod(t, "cancel-0", "kept", map[string]string{"app": "kept"})
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "keep", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "kept"}},
		},
	}
	if err := k8s.Create(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pdb) })
	annotate(t, "cancel-0", rebootv1.AnnotationNeeded, "true", rebootv1.AnnotationNeededSince, stamp(time.Now().Add(-time.Hour)))
	annotate(t, "cancel-1", rebootv1.AnnotationNeeded, "true")
	eventually(t, "cancel-0 approved and cordoned", func() (bool, error) {
		n := getNode(t, "cancel-0")
		_, ok := n.Annotations[rebootv1.AnnotationInProgress]
		return ok && n.Spec.Unschedulable, nil
	})

	annotate(t, "cancel-0", rebootv1.AnnotationNeeded, "false")
	eventually(t, "cancel-0's approval undone", func() (bool, error) {
		n := getNode(t, "cancel-0")
		for _, k := range []string{rebootv1.AnnotationInProgress, rebootv1.AnnotationBootID, rebootv1.AnnotationCordonedByUs,
			rebootv1.AnnotationNow, rebootv1.AnnotationNeededSince} {
			if _, ok := n.Annotations[k]; ok {
				return false, nil
			}
		}
		return !n.Spec.Unschedulable && n.Annotations[rebootv1.AnnotationNeeded] == "false", nil
	})
	eventually(t, "an Event says so", hasEvent(t, "cancel-0", EventCancelled, "withdrawn before the reboot was ordered"))
	eventually(t, "the next node rebooted in the freed slot", func() (bool, error) {
		return protocolDone(getNode(t, "cancel-1")), nil
	})
	slots, err := ledgerSlots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, held := slots["cancel-0"]; held {
		t.Fatal("cancel-0 still holds a slot in the ledger")
	}
	if rebootplan.NodeFrom(getNode(t, "cancel-0")).Needs() {
		t.Fatal("cancel-0 asks again")
	}
}
