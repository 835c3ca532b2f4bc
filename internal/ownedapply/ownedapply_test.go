package ownedapply_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kubext/kubext/internal/ownedapply"
	"github.com/kubext/kubext/test/testenv"
)

const (
	ns         = "default"
	fieldOwner = "kubext-test"
)

var k8s client.WithWatch // direct, uncached

func TestMain(m *testing.M) {
	testenv.Main(m, func(_ context.Context, env *testenv.Env) error {
		var err error
		k8s, err = client.NewWithWatch(env.Config, client.Options{})
		return err
	})
}

// newOwner creates an object for the test's Deployment to belong to. Any
// kind will do; envtest runs no garbage collector to act on the reference.
func newOwner(f *testenv.Fixture, name string) *corev1.ConfigMap {
	o := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + f.ID}}
	f.Create(o)
	return o
}

// want is the Deployment the owner wants, running image: the fields the
// field manager owns, and none of the many the API server defaults.
func want(f *testenv.Fixture, owner *corev1.ConfigMap, image string) *appsv1ac.DeploymentApplyConfiguration {
	labels := map[string]string{"app": "web-" + f.ID}
	return appsv1ac.Deployment("web-"+f.ID, ns).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion("v1").WithKind("ConfigMap").WithName(owner.Name).WithUID(owner.UID).WithController(true)).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(2).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("web").WithImage(image)))))
}

// apply applies through c for owner, whose status has observed the
// generation observed.
func apply(f *testenv.Fixture, c client.Client, owner *corev1.ConfigMap, observed int64,
	dep *appsv1ac.DeploymentApplyConfiguration) (*appsv1.Deployment, ownedapply.Result, error) {
	return ownedapply.Apply(f.Ctx, c, fieldOwner, owner, observed, dep, appsv1ac.ExtractDeployment)
}

// create applies the owner's Deployment, deleted when the test ends.
func create(f *testenv.Fixture, owner *corev1.ConfigMap) *appsv1.Deployment {
	f.T.Helper()
	dep, result, err := apply(f, k8s, owner, owner.Generation, want(f, owner, "web:1"))
	f.G.Expect(err).NotTo(HaveOccurred())
	f.T.Cleanup(func() { _ = k8s.Delete(context.Background(), dep) })
	f.G.Expect(result).To(Equal(ownedapply.Created))
	return dep
}

func TestCreatesThenWritesNothing(t *testing.T) {
	f := testenv.NewFixture(t, k8s)
	owner := newOwner(f, "owner")
	dep := create(f, owner)
	f.G.Expect(dep.UID).NotTo(BeEmpty(), "the API server's answer")
	f.G.Expect(dep.Spec.Template.Spec.Containers[0].Image).To(Equal("web:1"))
	f.G.Expect(dep.Spec.Strategy.Type).To(Equal(appsv1.RollingUpdateDeploymentStrategyType), "defaulted by the API server")
	f.G.Expect(metav1.IsControlledBy(dep, owner)).To(BeTrue())

	// The defaults are on the live object and not in what is wanted: no
	// difference, no write.
	var writes atomic.Int64
	counting := testenv.CountWrites(k8s, &writes)
	for range 3 {
		got, result, err := apply(f, counting, owner, owner.Generation, want(f, owner, "web:1"))
		f.G.Expect(err).NotTo(HaveOccurred())
		f.G.Expect(result).To(Equal(ownedapply.Unchanged))
		f.G.Expect(got.ResourceVersion).To(Equal(dep.ResourceVersion))
	}
	f.G.Expect(writes.Load()).To(BeZero())
	f.G.Expect(f.Get(client.ObjectKeyFromObject(dep), &appsv1.Deployment{}).GetResourceVersion()).To(Equal(dep.ResourceVersion))
}

func TestHealsAnEditAndUpdatesForANewSpec(t *testing.T) {
	f := testenv.NewFixture(t, k8s)
	owner := newOwner(f, "owner")
	dep := create(f, owner)
	var writes atomic.Int64
	counting := testenv.CountWrites(k8s, &writes)

	// What `kubectl edit` sends: a patch under another field manager, of
	// fields the field manager owns and of one it does not.
	f.G.Expect(k8s.Patch(f.Ctx, dep, testenv.MergePatch(`{"spec":{"replicas":5,"minReadySeconds":7,`+
		`"template":{"spec":{"containers":[{"name":"web","image":"evil:1"}]}}}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
	healed, result, err := apply(f, counting, owner, owner.Generation, want(f, owner, "web:1"))
	f.G.Expect(err).NotTo(HaveOccurred())
	f.G.Expect(result).To(Equal(ownedapply.Healed))
	f.G.Expect(writes.Load()).To(BeEquivalentTo(1))
	f.G.Expect(healed.Spec.Replicas).To(HaveValue(Equal(int32(2))))
	f.G.Expect(healed.Spec.Template.Spec.Containers[0].Image).To(Equal("web:1"))
	f.G.Expect(healed.Spec.MinReadySeconds).To(Equal(int32(7)), "not the field manager's: left as edited")

	// The owner's spec changed and its status has not caught up.
	updated, result, err := apply(f, counting, owner, owner.Generation-1, want(f, owner, "web:2"))
	f.G.Expect(err).NotTo(HaveOccurred())
	f.G.Expect(result).To(Equal(ownedapply.Updated))
	f.G.Expect(writes.Load()).To(BeEquivalentTo(2))
	f.G.Expect(updated.Spec.Template.Spec.Containers[0].Image).To(Equal("web:2"))
	f.G.Expect(updated.ResourceVersion).NotTo(Equal(healed.ResourceVersion))
}

func TestRefusesAnObjectItDoesNotControl(t *testing.T) {
	f := testenv.NewFixture(t, k8s)
	theirs := create(f, newOwner(f, "theirs"))
	owner := newOwner(f, "owner")

	var writes atomic.Int64
	got, result, err := apply(f, testenv.CountWrites(k8s, &writes), owner, owner.Generation, want(f, owner, "web:1"))
	f.G.Expect(err).To(MatchError(ownedapply.ErrNotControlled))
	f.G.Expect(got).To(BeNil())
	f.G.Expect(result).To(Equal(ownedapply.Unchanged))
	f.G.Expect(writes.Load()).To(BeZero())
	f.G.Expect(f.Get(client.ObjectKeyFromObject(theirs), &appsv1.Deployment{}).GetResourceVersion()).To(Equal(theirs.ResourceVersion))
}

func TestRejectedIsTold(t *testing.T) {
	f := testenv.NewFixture(t, k8s)
	owner := newOwner(f, "owner")
	dep := create(f, owner)

	bad := want(f, owner, "web:2")
	bad.Spec.WithReplicas(-1)
	got, result, err := apply(f, k8s, owner, owner.Generation-1, bad)
	var write *ownedapply.WriteError
	f.G.Expect(errors.As(err, &write)).To(BeTrue(), "%v", err)
	f.G.Expect(write.Rejected).To(BeTrue())
	f.G.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "the API server's answer, unwrapped")
	f.G.Expect(err.Error()).To(ContainSubstring("spec.replicas"))
	f.G.Expect(result).To(Equal(ownedapply.Unchanged))
	f.G.Expect(got.ResourceVersion).To(Equal(dep.ResourceVersion), "the Deployment as it stands")
	f.G.Expect(got.Spec.Template.Spec.Containers[0].Image).To(Equal("web:1"))

	// With no Deployment yet, there is none to return.
	bad = want(f, owner, "web:1")
	bad.WithName("new-" + f.ID).Spec.WithReplicas(-1)
	got, _, err = apply(f, k8s, owner, owner.Generation, bad)
	f.G.Expect(errors.As(err, &write) && write.Rejected).To(BeTrue(), "%v", err)
	f.G.Expect(got).To(BeNil())
}

func TestFailedWriteIsNotRejected(t *testing.T) {
	f := testenv.NewFixture(t, k8s)
	owner := newOwner(f, "owner")
	dep := create(f, owner)

	// An API server too busy to answer: the same apply may succeed later.
	busy := interceptor.NewClient(k8s, interceptor.Funcs{
		Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
			return apierrors.NewServerTimeout(schema.GroupResource{Group: "apps", Resource: "deployments"}, "apply", 1)
		},
	})
	got, result, err := apply(f, busy, owner, owner.Generation-1, want(f, owner, "web:2"))
	var write *ownedapply.WriteError
	f.G.Expect(errors.As(err, &write)).To(BeTrue(), "%v", err)
	f.G.Expect(write.Rejected).To(BeFalse())
	f.G.Expect(apierrors.IsServerTimeout(err)).To(BeTrue())
	f.G.Expect(result).To(Equal(ownedapply.Unchanged))
	f.G.Expect(got.ResourceVersion).To(Equal(dep.ResourceVersion))
}

// A cache that has not seen an object of the wanted name yet (here: one
// that never sees anything) must not make Apply take over someone else's
// object: the create is refused and nothing of theirs changes. Once the
// cache sees it, Apply says it is not the owner's.
func TestStaleCacheNeverTakesOverAnObject(t *testing.T) {
	f := testenv.NewFixture(t, k8s)
	owner := newOwner(f, "owner")
	theirs := &appsv1.Deployment{}
	mine := want(f, owner, "theirs:1")
	mine.OwnerReferences = nil // theirs: nobody's controller
	f.G.Expect(k8s.Apply(f.Ctx, mine, client.FieldOwner("someone-else"))).To(Succeed())
	f.Get(client.ObjectKey{Namespace: ns, Name: "web-" + f.ID}, theirs)
	f.T.Cleanup(func() { _ = k8s.Delete(context.Background(), theirs) })

	lagging := interceptor.NewClient(k8s, interceptor.Funcs{
		Get: func(_ context.Context, _ client.WithWatch, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
			return apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "deployments"}, key.Name)
		},
	})
	_, result, err := apply(f, lagging, owner, owner.Generation, want(f, owner, "web:1"))
	f.G.Expect(err).To(MatchError(ContainSubstring("exists though the cache has not seen it yet")))
	f.G.Expect(result).To(Equal(ownedapply.Unchanged))
	after := f.Get(client.ObjectKeyFromObject(theirs), &appsv1.Deployment{}).(*appsv1.Deployment)
	f.G.Expect(after.ResourceVersion).To(Equal(theirs.ResourceVersion), "theirs untouched")
	f.G.Expect(after.OwnerReferences).To(BeEmpty())

	_, _, err = apply(f, k8s, owner, owner.Generation, want(f, owner, "web:1"))
	f.G.Expect(err).To(MatchError(ownedapply.ErrNotControlled))
}
