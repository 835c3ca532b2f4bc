package reboot

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// frozenNodes is a node cache that stopped at one moment: its List
// returns the nodes as they were then, whatever happened since (an informer
// whose watch lags, as far behind as a test wants).
type frozenNodes struct {
	client.Reader
	nodes corev1.NodeList
}

func freezeNodes(t *testing.T, c client.Client) *frozenNodes {
	t.Helper()
	f := &frozenNodes{Reader: c}
	if err := c.List(t.Context(), &f.nodes); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *frozenNodes) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if nodes, ok := list.(*corev1.NodeList); ok {
		f.nodes.DeepCopyInto(nodes)
		return nil
	}
	return f.Reader.List(ctx, list, opts...)
}

// frozenLedger is a ledger cache that stopped at one moment (nil: the
// ledger did not exist then): an informer whose watch lags.
type frozenLedger struct {
	client.Reader
	cm *corev1.ConfigMap
}

func freezeLedger(t *testing.T, c client.Client) *frozenLedger {
	t.Helper()
	f := &frozenLedger{Reader: c}
	cm := &corev1.ConfigMap{}
	err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: DefaultLedgerName}, cm)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		t.Fatal(err)
	default:
		f.cm = cm
	}
	return f
}

func (f *frozenLedger) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || key.Name != DefaultLedgerName {
		return f.Reader.Get(ctx, key, obj, opts...)
	}
	if f.cm == nil {
		return apierrors.NewNotFound(corev1.Resource("configmaps"), key.Name)
	}
	f.cm.DeepCopyInto(cm)
	return nil
}

// TestLaggingCacheCannotApprovePastTheBudget: controller A decides from a
// node cache that stopped before controller B's approval (it never sees
// it), and is moreover stalled between its decision and its grant. With
// maxUnavailable 1, B approves lag-1 and orders its reboot (its slot is
// confirmed in the ledger by then) while A, whose cache shows lag-2
// asking and nothing approved, has decided to approve lag-2. A's grant is
// refused (the ledger changed since A read it). Then:
//   - ledger read fresh: every decision A makes again from its stale node
//     cache counts lag-1's slot through the ledger, and approves nothing.
//     Without the ledger's precondition A's first grant lands; without
//     counting every ledger slot its second does.
//   - ledger cache lagging too (it stopped with the nodes, as deployed the
//     ledger comes from a cache): A's every decision approves lag-2 and its
//     every grant is refused, since it is conditional on the version A
//     read. A stale ledger costs conflicts, never a slot.
func TestLaggingCacheCannotApprovePastTheBudget(t *testing.T) {
	t.Run("ledger read fresh", func(t *testing.T) { lagging(t, false) })
	t.Run("ledger cache lagging", func(t *testing.T) { lagging(t, true) })
}

func lagging(t *testing.T, laggingLedger bool) {
	env, c := ownAPIServer(t)
	ctx := t.Context()
	one := intstr.FromInt32(1)
	group := &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "lag"}, Spec: rebootv1.RebootGroupSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "lag"}}, MaxUnavailable: &one}}
	if err := c.Create(ctx, group); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lag-1", "lag-2"} {
		readyNode(t, c, name, "lag")
	}
	ask := func(name string, since time.Time) { askSince(t, c, name, since) }
	// The ledger exists already (as after any earlier reboot), so that
	// A's grant is an update, whose precondition is the resourceVersion
	// read, not a create that any existing ledger refuses.
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: DefaultLedgerName},
		Data: map[string]string{ledgerKey: "{}"}}); err != nil {
		t.Fatal(err)
	}
	ask("lag-2", time.Now().Add(-time.Hour))

	a, b := rival(t, env, c), rival(t, env, c)
	a.Reader = freezeNodes(t, c) // lag-2 asks, nothing approved: all A will ever see
	if laggingLedger {
		a.LedgerReader = freezeLedger(t, c) // no slot: all A will ever see
	}
	resume, aDone := stallBeforeGrant(t, a, "lag-2")

	// lag-1 asks, having waited longer; B approves it and, its drain
	// finished (no pods), orders its reboot.
	ask("lag-1", time.Now().Add(-2*time.Hour))
	eventuallyWithin(t, waitFor, "B approves lag-1 and orders its reboot", func() (bool, error) {
		if _, err := b.Reconcile(ctx, rollout); err != nil {
			return false, err
		}
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: "lag-1"}, n); err != nil {
			return false, err
		}
		return n.Annotations[rebootv1.AnnotationNow] != "", nil
	})
	l, err := b.readLedger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !l.slots["lag-1"].Confirmed {
		t.Fatal("lag-1's reboot was ordered before its slot was confirmed in the ledger")
	}

	holding := func() int { return holdingSlots(t, c, "lag") }
	resume()
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	if h := holding(); h > 1 {
		t.Fatalf("%d nodes hold a slot with maxUnavailable 1: A's grant from a stale ledger landed", h)
	}
	// A goes on deciding from its stale caches, as its requeues would make
	// it.
	for range 10 {
		res, err := a.Reconcile(ctx, rollout)
		if err != nil {
			t.Fatal(err)
		}
		if h := holding(); h > 1 {
			t.Fatalf("%d nodes hold a slot with maxUnavailable 1: A approved lag-2 from a cache that does not show lag-1's approval", h)
		}
		if laggingLedger && res.RequeueAfter != conflictRetry {
			t.Fatalf("A, deciding from a ledger without lag-1's slot, was not refused (result %+v)", res)
		}
	}
	if approved(t, c, "lag-2") {
		t.Fatal("lag-2 approved while lag-1 holds the only slot")
	}
}

// frozenGroups passes every read through but the list of groups, which
// stopped at one moment.
type frozenGroups struct {
	client.Reader
	groups rebootv1.RebootGroupList
}

func (f *frozenGroups) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if groups, ok := list.(*rebootv1.RebootGroupList); ok {
		f.groups.DeepCopyInto(groups)
		return nil
	}
	return f.Reader.List(ctx, list, opts...)
}

// TestOwnWritesOverlayLaggingCaches: the caches of the groups and of the
// ledger show the controller's own writes only after the watch's delay;
// the controller decides from what it wrote meanwhile (own.go), so its
// next write of either is not a certain conflict. Here the caches never
// catch up (they stopped before the ledger existed and before the group
// had a status): a controller alone rolls two nodes through the whole
// protocol, creating the ledger and updating it over its own versions,
// writing the group's status over its own, and not one of those writes is
// refused. Without the overlay the ledger's second write is refused for
// ever (nothing is ordered) and every status write after the first is a
// conflict.
func TestOwnWritesOverlayLaggingCaches(t *testing.T) {
	env, c := ownAPIServer(t)
	ctx := t.Context()
	two := intstr.FromInt32(2)
	group := &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "own"}, Spec: rebootv1.RebootGroupSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "own"}}, MaxUnavailable: &two,
		SoakSeconds: ptr.To[int32](0)}}
	if err := c.Create(ctx, group); err != nil {
		t.Fatal(err)
	}
	names := []string{"own-1", "own-2"}
	for _, name := range names {
		readyNode(t, c, name, "own")
		askSince(t, c, name, time.Now().Add(-time.Hour))
	}
	var refused atomic.Int64
	count := func(err error) error {
		if apierrors.IsConflict(err) {
			refused.Add(1)
		}
		return err
	}
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	a := rival(t, env, c)
	a.Client = interceptor.NewClient(base, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return count(c.Update(ctx, obj, opts...))
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			return count(c.SubResource(sub).Patch(ctx, obj, p, opts...))
		},
	})
	frozen := &frozenGroups{Reader: c}
	if err := c.List(ctx, &frozen.groups); err != nil {
		t.Fatal(err)
	}
	a.Reader = frozen
	a.LedgerReader = freezeLedger(t, c)
	rollToTheEnd(t, a, c, names)
	if n := refused.Load(); n != 0 {
		t.Errorf("%d of the controller's ledger and group status writes were refused as made over an old version, want 0", n)
	}
	got := &rebootv1.RebootGroup{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(group), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Done != 2 {
		t.Errorf("the group's status says %d reboots done, want 2", got.Status.Done)
	}
}
