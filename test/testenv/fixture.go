package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WaitFor is the patience of a controller test's Eventually: what a
// controller does in milliseconds on an idle machine can take seconds on
// a loaded one.
const WaitFor = 20 * time.Second

// Fixture is what one controller test works with: Gomega, a client that
// reads straight from the API server, and an ID for the test to put in the
// names of its objects, so that the tests of a package share one API
// server without seeing each other's objects.
type Fixture struct {
	T   *testing.T
	G   *gomega.WithT
	Ctx context.Context
	ID  string
	// Client reads and writes straight to the API server, not through a
	// cache, so that a test sees what it has just written.
	Client client.Client
}

// NewFixture returns the fixture of one test, with a new ID.
func NewFixture(t *testing.T, c client.Client) *Fixture {
	return &Fixture{T: t, G: gomega.NewWithT(t), Ctx: context.Background(), ID: rand.String(5), Client: c}
}

// Create creates o, deleted again when the test ends, and returns its key.
func (f *Fixture) Create(o client.Object) client.ObjectKey {
	f.T.Helper()
	f.G.Expect(f.Client.Create(f.Ctx, o)).To(gomega.Succeed())
	// The test's context is over by the time cleanups run.
	f.T.Cleanup(func() { _ = f.Client.Delete(context.Background(), o) })
	return client.ObjectKeyFromObject(o)
}

// Get reads the object of key into o and returns o.
func (f *Fixture) Get(key client.ObjectKey, o client.Object) client.Object {
	f.T.Helper()
	f.G.Expect(f.Client.Get(f.Ctx, key, o)).To(gomega.Succeed())
	return o
}

// Eventually waits until the object of key, read into o, satisfies match,
// and returns it.
func Eventually[O client.Object](f *Fixture, key client.ObjectKey, o O, match func(g gomega.Gomega, o O)) O {
	f.T.Helper()
	f.G.Eventually(func(g gomega.Gomega) {
		g.Expect(f.Client.Get(f.Ctx, key, o)).To(gomega.Succeed())
		match(g, o)
	}, WaitFor, 50*time.Millisecond).Should(gomega.Succeed())
	return o
}

// Event waits for an Event with the reason about the object of the kind
// and key, and returns it.
func (f *Fixture) Event(kind string, key client.ObjectKey, reason string) *eventsv1.Event {
	f.T.Helper()
	var found *eventsv1.Event
	f.G.Eventually(func(g gomega.Gomega) {
		events := &eventsv1.EventList{}
		g.Expect(f.Client.List(f.Ctx, events, client.InNamespace(key.Namespace))).To(gomega.Succeed())
		for i, e := range events.Items {
			if e.Regarding.Kind == kind && e.Regarding.Name == key.Name && e.Reason == reason {
				found = &events.Items[i]
			}
		}
		g.Expect(found).NotTo(gomega.BeNil(), "no %s event for %s", reason, key.Name)
	}, WaitFor, 100*time.Millisecond).Should(gomega.Succeed())
	return found
}

// WaitForCache waits until cache (a manager's client, which reads the
// cache its controllers read) holds each object at the resourceVersion it
// has, so that a reconcile run by the test computes from the state the API
// server has.
func (f *Fixture) WaitForCache(cache client.Reader, objs ...client.Object) {
	f.T.Helper()
	f.G.Eventually(func(g gomega.Gomega) {
		for _, o := range objs {
			cached := o.DeepCopyObject().(client.Object)
			g.Expect(cache.Get(f.Ctx, client.ObjectKeyFromObject(o), cached)).To(gomega.Succeed())
			g.Expect(cached.GetResourceVersion()).To(gomega.Equal(o.GetResourceVersion()))
		}
	}, WaitFor).Should(gomega.Succeed())
}

// MergePatch is the JSON merge patch s, as `kubectl patch --type=merge`
// sends it.
func MergePatch(s string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(s)) }

// HasCondition fails g unless conditions hold one of the type with the
// status and reason, written for generation: the object's current one,
// for a condition that reports on the current spec.
func HasCondition(g gomega.Gomega, conditions []metav1.Condition, typ string, status metav1.ConditionStatus, reason string, generation int64) {
	c := meta.FindStatusCondition(conditions, typ)
	g.Expect(c).NotTo(gomega.BeNil(), "no %s condition", typ)
	g.Expect(c.Status).To(gomega.Equal(status), c.Message)
	g.Expect(c.Reason).To(gomega.Equal(reason), c.Message)
	g.Expect(c.ObservedGeneration).To(gomega.Equal(generation))
}

// Applied fails unless some field manager has server-side applied the
// object: a controller using internal/ownedapply creates an object with
// Create and then applies it, so an object it made is as it left it only
// once the apply is in.
func Applied(g gomega.Gomega, o client.Object) {
	applied := false
	for _, m := range o.GetManagedFields() {
		applied = applied || m.Operation == metav1.ManagedFieldsOperationApply
	}
	g.Expect(applied).To(gomega.BeTrue(), "%s not applied yet (created, apply pending)", o.GetName())
}
