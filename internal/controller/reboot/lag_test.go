package reboot

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// TestLaggingCacheCannotApprovePastTheBudget: controller A decides from a
// node cache that stopped before controller B's approval (it never sees
// it), and is moreover stalled between its decision and its grant. With
// maxUnavailable 1, B approves lag-1 and orders its reboot (its slot is
// confirmed in the ledger by then) while A, whose cache shows lag-2
// asking and nothing approved, has decided to approve lag-2. A's grant is
// refused (the ledger changed since A read it), and every decision A makes
// again from its stale cache counts lag-1's slot through the fresh ledger:
// lag-2 is never approved while lag-1 holds the slot. Without the ledger's
// precondition A's first grant lands; without counting every ledger slot
// its second does.
func TestLaggingCacheCannotApprovePastTheBudget(t *testing.T) {
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
	a.NodeReader = freezeNodes(t, c) // lag-2 asks, nothing approved: all A will ever see
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
	// A goes on deciding from its stale cache, as its requeues would make
	// it; the ledger it reads fresh holds lag-1.
	for range 10 {
		if _, err := a.Reconcile(ctx, rollout); err != nil {
			t.Fatal(err)
		}
		if h := holding(); h > 1 {
			t.Fatalf("%d nodes hold a slot with maxUnavailable 1: A approved lag-2 from a cache that does not show lag-1's approval", h)
		}
	}
	if approved(t, c, "lag-2") {
		t.Fatal("lag-2 approved while lag-1 holds the only slot")
	}
}
