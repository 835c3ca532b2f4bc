package reboot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootplan"
)

// writeLog records the writes a controller makes: "ledger" for the
// approvals ledger, "node/NAME" for a node patch.
type writeLog struct {
	mu  sync.Mutex
	ops []string
}

func (w *writeLog) add(op string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ops = append(w.ops, op)
}

// take returns the writes recorded since the last take.
func (w *writeLog) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ops := w.ops
	w.ops = nil
	return ops
}

// TestAWaveIsWrittenTogether: the nodes of a group move in waves (a
// maxUnavailable of 3 approves, and later releases, three nodes in one
// reconcile). A wave's node patches are made together, not one after the
// other, so one of them refused does not hold up the others: with
// wave-2 changed by someone else between the decision and its patch,
// wave-1 and wave-3 are approved and their drains started in the same
// reconcile, which asks for a quick look again; the next approves wave-2.
// When the wave's reboots are verified, the three nodes are released and
// then their slots given back to the ledger in one write (the ledger's
// step 3: a node's slot is never gone from both the ledger and the node
// while it is still in its reboot).
func TestAWaveIsWrittenTogether(t *testing.T) {
	env, c := ownAPIServer(t)
	ctx := t.Context()
	three := intstr.FromInt32(3)
	group := &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "wave"}, Spec: rebootv1.RebootGroupSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "wave"}}, MaxUnavailable: &three,
		SoakSeconds: ptr.To[int32](0)}}
	if err := c.Create(ctx, group); err != nil {
		t.Fatal(err)
	}
	nodes := []string{"wave-1", "wave-2", "wave-3"}
	for _, name := range nodes {
		readyNode(t, c, name, "wave")
		setAnnotations(t, c, name, map[string]string{rebootv1.AnnotationNeeded: "true"})
	}

	log := &writeLog{}
	touch := map[string]bool{"wave-2": true} // changed once under the controller's first patch of it
	var touchMu sync.Mutex
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	recording := interceptor.NewClient(base, interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*corev1.Node); ok {
				touchMu.Lock()
				once := touch[obj.GetName()]
				delete(touch, obj.GetName())
				touchMu.Unlock()
				if once {
					setAnnotations(t, c, obj.GetName(), map[string]string{"test.kubext.io/touched": "true"})
				}
				log.add("node/" + obj.GetName())
			}
			return cl.Patch(ctx, obj, patch, opts...)
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok {
				log.add("ledger")
			}
			return cl.Update(ctx, obj, opts...)
		},
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok {
				log.add("ledger")
			}
			return cl.Create(ctx, obj, opts...)
		},
	})
	r := rival(t, env, c)
	r.Client = recording

	res, err := r.Reconcile(ctx, rollout)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != rereadRetry {
		t.Errorf("after a refused node patch, the node read again, the controller looks again in %s, want %s", res.RequeueAfter, rereadRetry)
	}
	for _, name := range []string{"wave-1", "wave-3"} {
		n := getNodeFrom(t, c, name)
		approval := n.Annotations[rebootv1.AnnotationInProgress]
		if approval == "" {
			t.Fatalf("%s was not approved in the reconcile in which wave-2's patch was refused", name)
		}
		if _, started := r.drains.result(name, approval); !started {
			t.Errorf("%s approved but its drain not started", name)
		}
	}
	if approved(t, c, "wave-2") {
		t.Fatal("wave-2 approved although its patch was made over a version someone else had changed")
	}
	if ops := log.take(); len(ops) == 0 || ops[0] != "ledger" || slices.Index(ops[1:], "ledger") >= 0 {
		t.Fatalf("the wave's approvals were not granted in one ledger write made before the node patches: %v", ops)
	}

	// The next looks approve wave-2, and the drains (no pods) finish:
	// every node's reboot is ordered.
	eventuallyWithin(t, waitFor, "every node of the wave ordered to reboot", func() (bool, error) {
		if _, err := r.Reconcile(ctx, rollout); err != nil {
			return false, err
		}
		ordered := 0
		for _, name := range nodes {
			n := getNodeFrom(t, c, name)
			if h := holdingSlots(t, c, "wave"); h > 3 {
				return false, fmt.Errorf("%d nodes hold a slot with maxUnavailable 3", h)
			}
			if n.Annotations[rebootv1.AnnotationNow] != "" {
				ordered++
			}
		}
		return ordered == len(nodes), nil
	})
	// The three reboot (new boot ID, Ready) and are verified together.
	for _, name := range nodes {
		n := getNodeFrom(t, c, name)
		n.Status.NodeInfo.BootID = "boot-" + name + "-after"
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Minute))}}
		if err := c.Status().Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	log.take()
	if _, err := r.Reconcile(ctx, rollout); err != nil {
		t.Fatal(err)
	}
	ops := log.take()
	for _, name := range nodes {
		if n := getNodeFrom(t, c, name); n.Annotations[rebootv1.AnnotationRebootedAt] == "" || rebootplan.NodeFrom(n).HoldsSlot() {
			t.Fatalf("%s not released in the reconcile that verified its reboot: %v", name, n.Annotations)
		}
	}
	want := []string{"node/wave-1", "node/wave-2", "node/wave-3", "ledger"}
	got := slices.Clone(ops)
	slices.Sort(got[:max(len(got)-1, 0)])
	if !slices.Equal(got, want) {
		t.Fatalf("releasing the wave wrote %v, want each node once and then the ledger once (%v)", ops, want)
	}
	l, err := r.readLedger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.slots) != 0 {
		t.Fatalf("slots left in the ledger after the wave was released: %v", l.slots)
	}
}

// TestARefusedReleaseDoesNotHoldUpTheNext: two reboots verified in one
// reconcile, one of the two nodes changed by someone else under its
// release patch. The other's slot is freed and taken by the next node in
// that same reconcile; the refused node still shows its approval and keeps
// its slot through it (never more than maxUnavailable hold one), and the
// controller looks again soon, releasing it then.
func TestARefusedReleaseDoesNotHoldUpTheNext(t *testing.T) {
	env, c := ownAPIServer(t)
	ctx := t.Context()
	two := intstr.FromInt32(2)
	group := &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "free"}, Spec: rebootv1.RebootGroupSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "free"}}, MaxUnavailable: &two,
		SoakSeconds: ptr.To[int32](0)}}
	if err := c.Create(ctx, group); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		readyNode(t, c, fmt.Sprintf("free-%d", i), "free")
	}
	askSince(t, c, "free-1", time.Now().Add(-4*time.Hour))
	askSince(t, c, "free-2", time.Now().Add(-3*time.Hour))

	var touchMu sync.Mutex
	touch := map[string]bool{}
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	r := rival(t, env, c)
	r.Client = interceptor.NewClient(base, interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			touchMu.Lock()
			once := touch[obj.GetName()]
			delete(touch, obj.GetName())
			touchMu.Unlock()
			if once {
				setAnnotations(t, c, obj.GetName(), map[string]string{"test.kubext.io/touched": "true"})
			}
			return cl.Patch(ctx, obj, patch, opts...)
		},
	})
	eventuallyWithin(t, waitFor, "free-1 and free-2 ordered to reboot", func() (bool, error) {
		if _, err := r.Reconcile(ctx, rollout); err != nil {
			return false, err
		}
		return getNodeFrom(t, c, "free-1").Annotations[rebootv1.AnnotationNow] != "" &&
			getNodeFrom(t, c, "free-2").Annotations[rebootv1.AnnotationNow] != "", nil
	})
	// Both reboot; free-3 and free-4 ask meanwhile.
	for _, name := range []string{"free-1", "free-2"} {
		n := getNodeFrom(t, c, name)
		n.Status.NodeInfo.BootID += "-after"
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Minute))}}
		if err := c.Status().Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	askSince(t, c, "free-3", time.Now().Add(-2*time.Hour))
	askSince(t, c, "free-4", time.Now().Add(-time.Hour))

	touchMu.Lock()
	touch["free-1"] = true
	touchMu.Unlock()
	res, err := r.Reconcile(ctx, rollout)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != rereadRetry {
		t.Errorf("after a refused release, the node read again, the controller looks again in %s, want %s", res.RequeueAfter, rereadRetry)
	}
	if n := getNodeFrom(t, c, "free-2"); n.Annotations[rebootv1.AnnotationRebootedAt] == "" || rebootplan.NodeFrom(n).HoldsSlot() {
		t.Fatalf("free-2 not released: %v", n.Annotations)
	}
	if !rebootplan.NodeFrom(getNodeFrom(t, c, "free-1")).HoldsSlot() {
		t.Fatal("free-1 released although its patch was refused")
	}
	if !approved(t, c, "free-3") {
		t.Fatal("free-2's slot was not given to free-3 in the reconcile that released free-2")
	}
	if h := holdingSlots(t, c, "free"); h > 2 {
		t.Fatalf("%d nodes hold a slot with maxUnavailable 2", h)
	}
	// The next look releases free-1 and gives its slot to free-4.
	eventuallyWithin(t, waitFor, "free-1 released and free-4 approved", func() (bool, error) {
		if _, err := r.Reconcile(ctx, rollout); err != nil {
			return false, err
		}
		if h := holdingSlots(t, c, "free"); h > 2 {
			return false, fmt.Errorf("%d nodes hold a slot with maxUnavailable 2", h)
		}
		return !rebootplan.NodeFrom(getNodeFrom(t, c, "free-1")).HoldsSlot() && approved(t, c, "free-4"), nil
	})
}

// TestAHandOverIsThreeWrites: with maxUnavailable 1, the reconcile that
// verifies one node's reboot hands its slot to the next node waiting in
// three writes one after the other: the release of the first, one ledger
// write giving its slot back and granting it to the next, the next's
// approval. After each write, at most one node counts against the budget
// (the ledger's slots and the nodes showing an approval together) and at
// most one node is cordoned.
func TestAHandOverIsThreeWrites(t *testing.T) {
	env, c := ownAPIServer(t)
	ctx := t.Context()
	one := intstr.FromInt32(1)
	group := &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "hand"}, Spec: rebootv1.RebootGroupSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "hand"}}, MaxUnavailable: &one,
		SoakSeconds: ptr.To[int32](0)}}
	if err := c.Create(ctx, group); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hand-1", "hand-2"} {
		readyNode(t, c, name, "hand")
	}
	askSince(t, c, "hand-1", time.Now().Add(-2*time.Hour))
	askSince(t, c, "hand-2", time.Now().Add(-time.Hour))

	r := rival(t, env, c)
	eventuallyWithin(t, waitFor, "hand-1 ordered to reboot", func() (bool, error) {
		if _, err := r.Reconcile(ctx, rollout); err != nil {
			return false, err
		}
		return getNodeFrom(t, c, "hand-1").Annotations[rebootv1.AnnotationNow] != "", nil
	})
	n := getNodeFrom(t, c, "hand-1")
	n.Status.NodeInfo.BootID += "-after"
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Minute))}}
	if err := c.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}

	// After each write: what counts against the budget, and what is
	// cordoned, read from the API server.
	var overs []string
	check := func(after string) {
		slots, err := ledgerSlotsFrom(ctx, c)
		if err != nil {
			t.Error(err)
			return
		}
		counted, cordoned := map[string]bool{}, 0
		for name := range slots {
			counted[name] = true
		}
		for _, name := range []string{"hand-1", "hand-2"} {
			n := getNodeFrom(t, c, name)
			if approved(t, c, name) {
				counted[name] = true
			}
			if n.Spec.Unschedulable {
				cordoned++
			}
		}
		if len(counted) > 1 || cordoned > 1 {
			overs = append(overs, fmt.Sprintf("after %s: counted %v, %d cordoned", after, counted, cordoned))
		}
	}
	log := &writeLog{}
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	r.Client = interceptor.NewClient(base, interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			err := cl.Patch(ctx, obj, patch, opts...)
			if _, ok := obj.(*corev1.Node); ok && err == nil {
				log.add("node/" + obj.GetName())
				check("node/" + obj.GetName())
			}
			return err
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			err := cl.Update(ctx, obj, opts...)
			if _, ok := obj.(*corev1.ConfigMap); ok && err == nil {
				log.add("ledger")
				check("ledger")
			}
			return err
		},
	})
	r.APIReader = r.Client
	if _, err := r.Reconcile(ctx, rollout); err != nil {
		t.Fatal(err)
	}
	if want, got := []string{"node/hand-1", "ledger", "node/hand-2"}, log.take(); !slices.Equal(got, want) {
		t.Fatalf("the hand-over wrote %v, want %v", got, want)
	}
	for _, o := range overs {
		t.Error(o)
	}
	if n := getNodeFrom(t, c, "hand-1"); n.Annotations[rebootv1.AnnotationRebootedAt] == "" || n.Spec.Unschedulable {
		t.Errorf("hand-1 not released: unschedulable %v, annotations %v", n.Spec.Unschedulable, n.Annotations)
	}
	slots, err := ledgerSlotsFrom(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := slots["hand-2"]; len(slots) != 1 || !ok || !approved(t, c, "hand-2") {
		t.Fatalf("hand-2 not granted and approved: ledger %v", slots)
	}
}

// TestAGiveBackLostAfterItsReleaseIsRepaired: the controller releases a
// node whose reboot it verified and stops before the ledger write that
// gives its slot back (here the write is refused). The slot is not left
// until the group's reboot timeout (an hour): the next controller, with
// nothing in memory, reads the node from the API server, sees the reboot
// the slot ordered completed, gives the slot back and approves the next
// node. A node that lost its annotations while down (deleted and
// registered again) is not taken for a completed one: its slot stays.
func TestAGiveBackLostAfterItsReleaseIsRepaired(t *testing.T) {
	env, c := ownAPIServer(t)
	ctx := t.Context()
	one := intstr.FromInt32(1)
	group := &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "lost"}, Spec: rebootv1.RebootGroupSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "lost"}}, MaxUnavailable: &one,
		SoakSeconds: ptr.To[int32](0), RebootTimeoutSeconds: 3600}}
	if err := c.Create(ctx, group); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lost-1", "lost-2", "lost-3"} {
		readyNode(t, c, name, "lost")
	}
	askSince(t, c, "lost-1", time.Now().Add(-3*time.Hour))
	askSince(t, c, "lost-2", time.Now().Add(-2*time.Hour))

	first := rival(t, env, c)
	eventuallyWithin(t, waitFor, "lost-1 ordered to reboot", func() (bool, error) {
		if _, err := first.Reconcile(ctx, rollout); err != nil {
			return false, err
		}
		return getNodeFrom(t, c, "lost-1").Annotations[rebootv1.AnnotationNow] != "", nil
	})
	n := getNodeFrom(t, c, "lost-1")
	n.Status.NodeInfo.BootID += "-after"
	if err := c.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	first.Client = interceptor.NewClient(base, interceptor.Funcs{
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok {
				return errors.New("the controller stopped here")
			}
			return cl.Update(ctx, obj, opts...)
		},
	})
	if _, err := first.Reconcile(ctx, rollout); err == nil {
		t.Fatal("the reconcile whose ledger write failed reported no error")
	}
	if n := getNodeFrom(t, c, "lost-1"); n.Annotations[rebootv1.AnnotationRebootedAt] == "" || approved(t, c, "lost-1") {
		t.Fatalf("lost-1 not released before the ledger write: %v", n.Annotations)
	}
	if slots, err := ledgerSlotsFrom(ctx, c); err != nil || len(slots) != 1 {
		t.Fatalf("the ledger should still hold lost-1's slot: %v %v", slots, err)
	}
	if approved(t, c, "lost-2") {
		t.Fatal("lost-2 approved while lost-1's slot was still in the ledger")
	}

	second := rival(t, env, c)
	eventuallyWithin(t, waitFor, "lost-1's slot given back and lost-2 approved", func() (bool, error) {
		if _, err := second.Reconcile(ctx, rollout); err != nil {
			return false, err
		}
		return approved(t, c, "lost-2"), nil
	})
	slots, err := ledgerSlotsFrom(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := slots["lost-1"]; ok {
		t.Fatalf("lost-1's slot kept after its reboot completed: %v", slots)
	}

	// lost-2 is ordered, and then lost while down: deleted and registered
	// again, in another boot, without its annotations. Its slot stays;
	// lost-3 waits.
	eventuallyWithin(t, waitFor, "lost-2 ordered to reboot", func() (bool, error) {
		if _, err := second.Reconcile(ctx, rollout); err != nil {
			return false, err
		}
		return getNodeFrom(t, c, "lost-2").Annotations[rebootv1.AnnotationNow] != "", nil
	})
	askSince(t, c, "lost-3", time.Now().Add(-time.Hour))
	if err := c.Delete(ctx, getNodeFrom(t, c, "lost-2")); err != nil {
		t.Fatal(err)
	}
	readyNode(t, c, "lost-2", "lost")
	n = getNodeFrom(t, c, "lost-2")
	n.Status.NodeInfo.BootID += "-after"
	if err := c.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := second.Reconcile(ctx, rollout); err != nil {
			t.Fatal(err)
		}
	}
	if approved(t, c, "lost-3") {
		t.Fatal("lost-3 approved while lost-2, lost while down, still holds its slot")
	}
	if slots, err := ledgerSlotsFrom(ctx, c); err != nil || len(slots) != 1 {
		t.Fatalf("lost-2's slot should stay until the group's timeout: %v %v", slots, err)
	}
}

// TestARefusedPatchIsMadeAgainFromTheNodeReadAgain: the node changes under
// the controller's order patch (as kube-controller-manager's taint follows
// a cordon), and the controller's node cache is stuck before the change.
// The refused node is read again from the API server at once, the
// controller looks again at once, and the order is made over the version
// read, not the cache's: without that read, a cache that lags keeps every
// patch refused until it catches up. A node refused again waits
// conflictRetry: a node someone writes without pause does not make the
// controller spin.
func TestARefusedPatchIsMadeAgainFromTheNodeReadAgain(t *testing.T) {
	env, c := ownAPIServer(t)
	ctx := t.Context()
	one := intstr.FromInt32(1)
	group := &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "again"}, Spec: rebootv1.RebootGroupSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "again"}}, MaxUnavailable: &one,
		SoakSeconds: ptr.To[int32](0)}}
	if err := c.Create(ctx, group); err != nil {
		t.Fatal(err)
	}
	readyNode(t, c, "again-1", "again")
	askSince(t, c, "again-1", time.Now().Add(-time.Hour))
	r := rival(t, env, c)
	eventuallyWithin(t, waitFor, "again-1 approved", func() (bool, error) {
		if _, err := r.Reconcile(ctx, rollout); err != nil {
			return false, err
		}
		return approved(t, c, "again-1"), nil
	})
	approval := getNodeFrom(t, c, "again-1").Annotations[rebootv1.AnnotationInProgress]
	eventuallyWithin(t, waitFor, "again-1 drained", func() (bool, error) {
		run, started := r.drains.result("again-1", approval)
		return started && run.finished, nil
	})
	if getNodeFrom(t, c, "again-1").Annotations[rebootv1.AnnotationNow] != "" {
		t.Fatal("again-1 ordered before its drain was seen finished")
	}
	r.Reader = freezeNodes(t, c)

	touches := 2 // under the first two order patches
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	r.Client = interceptor.NewClient(base, interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*corev1.Node); ok && touches > 0 {
				touches--
				setAnnotations(t, c, obj.GetName(), map[string]string{"test.kubext.io/touched": fmt.Sprint(touches)})
			}
			return cl.Patch(ctx, obj, patch, opts...)
		},
	})
	var waits []time.Duration
	for range 3 {
		res, err := r.Reconcile(ctx, rollout)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, res.RequeueAfter)
		if getNodeFrom(t, c, "again-1").Annotations[rebootv1.AnnotationNow] != "" {
			break
		}
	}
	if getNodeFrom(t, c, "again-1").Annotations[rebootv1.AnnotationNow] == "" {
		t.Fatalf("again-1 not ordered in three looks from a cache stuck before the change (waits %v)", waits)
	}
	if len(waits) != 3 || waits[0] != rereadRetry || waits[1] != conflictRetry {
		t.Fatalf("looks again after %v, want %s after the first refusal and %s after the second", waits, rereadRetry, conflictRetry)
	}
}
