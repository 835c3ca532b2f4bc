package reboot

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
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
	env, c := ownAPIServer(t)
	ctx := t.Context()
	one := intstr.FromInt32(1)
	group := &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "race"}, Spec: rebootv1.RebootGroupSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "race"}}, MaxUnavailable: &one}}
	if err := c.Create(ctx, group); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"race-1", "race-2"} {
		readyNode(t, c, name, "race")
	}
	ask := func(name string, since time.Time) { askSince(t, c, name, since) }
	ask("race-2", time.Now().Add(-time.Hour))

	a, b := rival(t, env, c), rival(t, env, c)
	resume, aDone := stallBeforeGrant(t, a, "race-2")

	ask("race-1", time.Now().Add(-2*time.Hour))
	if _, err := b.Reconcile(ctx, rollout); err != nil {
		t.Fatal(err)
	}
	if !approved(t, c, "race-1") {
		t.Fatal("controller B did not approve race-1, the node that waited longest")
	}
	resume()
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

// readyNode creates a Ready node with the label pool=pool and boot ID
// boot-<name> through c (a rival's own API server).
func readyNode(t *testing.T, c client.Client, name, pool string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": pool}}}
	if err := c.Create(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	n.Status = corev1.NodeStatus{
		NodeInfo:   corev1.NodeSystemInfo{BootID: "boot-" + name},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}},
	}
	if err := c.Status().Update(t.Context(), n); err != nil {
		t.Fatal(err)
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
// then never land): the slot is neither lost nor leaked.
func TestLedgerRepairsGrantsWithoutTheirNodePatch(t *testing.T) {
	g := makeGroup(t, "repair", intstr.FromInt32(1), nil)
	makeNode(t, g.Name, "repair-0", nil)
	makeNode(t, g.Name, "repair-1", nil)
	makeNode(t, "repair-poke", "repair-poke", nil)
	// Make sure the ledger exists: one reboot through it.
	startAgents(t, g.Name, 0)
	annotate(t, "repair-0", rebootv1.AnnotationNeeded, "true")
	eventually(t, "repair-0 rebooted", func() (bool, error) { return protocolDone(getNode(t, "repair-0")), nil })

	// A grant for repair-1, decided from its current version while its
	// group is paused (so nothing else approves it): completed, and the
	// reboot it grants runs to the end like any approved one. (The
	// approval itself may be on the node for only a moment; its outcome is
	// what the test waits for.)
	paused := &rebootv1.RebootGroup{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(g), paused); err != nil {
		t.Fatal(err)
	}
	// A patch: the controller may write the group's status meanwhile.
	base := client.MergeFrom(paused.DeepCopy())
	paused.Spec.Paused = true
	if err := k8s.Patch(context.Background(), paused, base); err != nil {
		t.Fatal(err)
	}
	// needed-since too, so that the controller has nothing to write to
	// the node (which would change the version the grant is for).
	annotate(t, "repair-1", rebootv1.AnnotationNeeded, "true", rebootv1.AnnotationNeededSince, stamp(time.Now()))
	n := getNode(t, "repair-1")
	addLedgerSlot(t, "repair-1", slot{Group: g.Name, Approval: stamp(time.Now().Add(-time.Second)), NodeResourceVersion: n.ResourceVersion})
	eventually(t, "repair-1 rebooted through the completed grant, its slot given back", func() (bool, error) {
		slots, err := ledgerSlots(context.Background())
		_, held := slots["repair-1"]
		return protocolDone(getNode(t, "repair-1")) && !held, err
	})

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
	eventually(t, "and on the group", groupHasEvent(t, g.Name, EventCancelled))
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

// TestTwoLeadersNeverExceedTheBudget runs two controllers without leader
// election against one API server for a whole rollout, each pausing for a
// random moment between its decisions and its grants (a stalled leader),
// while requests keep arriving in random order with random ages (so a
// paused controller's choice differs from its rival's fresh one), agents
// reboot nodes as ordered, and the nodes are sampled all along: never more
// than maxUnavailable nodes hold a slot at once, and the rollout finishes.
// It is a soak test of the whole protocol under two writers; the exact
// interleaving that breaks a budget without the ledger is forced in
// TestStalledLeaderCannotApprovePastTheBudget (random timing rarely hits
// it: both controllers mostly choose the same node, which the node's own
// resourceVersion already protects).
func TestTwoLeadersNeverExceedTheBudget(t *testing.T) {
	env, c := ownAPIServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const nodes, budget = 8, 2
	two := intstr.FromInt32(budget)
	group := &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "leaders"}, Spec: rebootv1.RebootGroupSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "leaders"}}, MaxUnavailable: &two,
		SoakSeconds: ptr.To[int32](0)}}
	if err := c.Create(ctx, group); err != nil {
		t.Fatal(err)
	}
	for i := range nodes {
		readyNode(t, c, fmt.Sprintf("leaders-%d", i), "leaders")
	}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	loop := func(every time.Duration, f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(every):
					f()
				}
			}
		}()
	}
	for i := range 2 {
		r := rival(t, env, c)
		rng := rand.New(rand.NewPCG(uint64(i), 42))
		r.beforeGrant = func() { time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond) }
		loop(5*time.Millisecond, func() { _, _ = r.Reconcile(ctx, rollout) })
	}
	// Requests arrive one by one, in random order, each having waited a
	// random time (the order in which they are approved).
	asking := rand.New(rand.NewPCG(7, 7)).Perm(nodes)
	loop(40*time.Millisecond, func() {
		if len(asking) == 0 {
			return
		}
		name := fmt.Sprintf("leaders-%d", asking[0])
		asking = asking[1:]
		since := time.Now().Add(-time.Duration(rand.IntN(3600)) * time.Second).UTC().Format(time.RFC3339)
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			rebootv1.AnnotationNeeded: "true", rebootv1.AnnotationNeededSince: since}}})
		_ = c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, patch))
	})
	// The agents: a node ordered to reboot comes back at once in a new boot.
	loop(10*time.Millisecond, func() {
		list := &corev1.NodeList{}
		if c.List(ctx, list, client.MatchingLabels{"pool": "leaders"}) != nil {
			return
		}
		for i := range list.Items {
			n := &list.Items[i]
			if n.Annotations[rebootv1.AnnotationNow] == "" || n.Annotations[rebootv1.AnnotationBootID] != n.Status.NodeInfo.BootID {
				continue
			}
			n.Status.NodeInfo.BootID += "+"
			n.Status.Conditions[0].LastTransitionTime = metav1.Now()
			_ = c.Status().Update(ctx, n)
		}
	})
	var mu sync.Mutex
	most, done := 0, 0
	loop(2*time.Millisecond, func() {
		list := &corev1.NodeList{}
		if c.List(ctx, list, client.MatchingLabels{"pool": "leaders"}) != nil {
			return
		}
		holding, finished := 0, 0
		for _, n := range list.Items {
			if rebootplan.NodeFrom(&n).HoldsSlot() {
				holding++
			}
			if n.Annotations[rebootv1.AnnotationRebootedAt] != "" && !rebootplan.NodeFrom(&n).Needs() {
				finished++
			}
		}
		mu.Lock()
		most, done = max(most, holding), finished
		mu.Unlock()
	})
	for ctx.Err() == nil {
		mu.Lock()
		finished := done
		mu.Unlock()
		if finished == nodes {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if done != nodes {
		t.Fatalf("only %d of %d nodes rebooted before the deadline", done, nodes)
	}
	if most > budget {
		t.Fatalf("%d nodes held a slot at once with maxUnavailable %d", most, budget)
	}
	t.Logf("%d nodes rebooted by two controllers, at most %d at once (budget %d)", nodes, most, budget)
}

// An approval the ledger as read does not hold (a ledger cache behind
// another leader's grant; an approval made before the ledger existed) is
// not ordered until the ledger holds its slot, confirmed, with the order:
// the order's ledger write adds it. Without that, the node would reboot with no slot
// that outlives it (deleted while down, it would free its slot at once)
// and its agent would refuse the order as untraced.
func TestOrderWritesTheSlotTheLedgerLacks(t *testing.T) {
	env, c := ownAPIServer(t)
	ctx := t.Context()
	one := intstr.FromInt32(1)
	group := &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "adopt"}, Spec: rebootv1.RebootGroupSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "adopt"}}, MaxUnavailable: &one}}
	if err := c.Create(ctx, group); err != nil {
		t.Fatal(err)
	}
	readyNode(t, c, "adopt-1", "adopt")
	approval := stamp(time.Now().Add(-time.Minute))
	setAnnotations(t, c, "adopt-1", map[string]string{rebootv1.AnnotationNeeded: "true",
		rebootv1.AnnotationInProgress: approval, rebootv1.AnnotationBootID: "boot-adopt-1"})
	a := rival(t, env, c)
	eventuallyWithin(t, waitFor, "adopt-1's reboot ordered", func() (bool, error) {
		if _, err := a.Reconcile(ctx, rollout); err != nil {
			return false, err
		}
		return getNodeFrom(t, c, "adopt-1").Annotations[rebootv1.AnnotationNow] != "", nil
	})
	l, err := a.readLedger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sl, held := l.slots["adopt-1"]
	if !held || !sl.Confirmed || sl.Approval != approval || sl.Group != "adopt" {
		t.Fatalf("adopt-1 was ordered to reboot without its confirmed slot in the ledger: %+v", l.slots)
	}
	// The slot records the order itself, which is what the agent checks
	// (internal/rebootagent, TestOnlyOrdersInTheLedgerReboot).
	if now := getNodeFrom(t, c, "adopt-1").Annotations[rebootv1.AnnotationNow]; sl.Order != now || sl.BootID != "boot-adopt-1" {
		t.Fatalf("adopt-1's slot records the order %q for boot %q, the node shows %q for boot-adopt-1", sl.Order, sl.BootID, now)
	}
}
