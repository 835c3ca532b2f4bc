package reboot

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// sharingNodes lists nodes as the informer cache does when asked not to
// copy them (client.UnsafeDisableDeepCopy): each item's maps and slices
// are those of an object the reader keeps. It remembers every object it
// handed out, and a copy of it as handed out.
type sharingNodes struct {
	client.Reader
	mu             sync.Mutex
	handed, copies []*corev1.Node
}

func (s *sharingNodes) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	nodes, ok := list.(*corev1.NodeList)
	if !ok {
		return s.Reader.List(ctx, list, opts...)
	}
	var fresh corev1.NodeList
	if err := s.Reader.List(ctx, &fresh); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nodes.Items = make([]corev1.Node, len(fresh.Items))
	for i := range fresh.Items {
		kept := &fresh.Items[i]
		s.handed = append(s.handed, kept)
		s.copies = append(s.copies, kept.DeepCopy())
		nodes.Items[i] = *kept
	}
	return nil
}

// TestReconcileNeverChangesTheNodesItReads: the controller decides from the
// cache's own node objects, not copies (state.read), which is safe only as
// long as no step of a reconcile changes a node it read — approving,
// ordering, verifying and releasing all change copies. A controller rolls
// two nodes through the whole protocol from a reader that shares its
// objects as the cache does; every object it was handed is as it was
// handed.
func TestReconcileNeverChangesTheNodesItReads(t *testing.T) {
	env, c := ownAPIServer(t)
	ctx := t.Context()
	one := intstr.FromInt32(1)
	group := &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "ro"}, Spec: rebootv1.RebootGroupSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "ro"}}, MaxUnavailable: &one,
		SoakSeconds: ptr.To[int32](0)}}
	if err := c.Create(ctx, group); err != nil {
		t.Fatal(err)
	}
	names := []string{"ro-1", "ro-2"}
	for _, name := range names {
		readyNode(t, c, name, "ro")
		askSince(t, c, name, time.Now().Add(-time.Hour))
	}
	shared := &sharingNodes{Reader: c}
	a := rival(t, env, c)
	a.Reader = shared
	rollToTheEnd(t, a, c, names)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for i, n := range shared.handed {
		if !equality.Semantic.DeepEqual(n, shared.copies[i]) {
			t.Fatalf("a reconcile changed node %s (version %s) it had read", n.Name, n.ResourceVersion)
		}
	}
	t.Logf("%d node objects handed out, none changed", len(shared.handed))
}
