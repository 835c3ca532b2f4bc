package statuspatch_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	stablev1 "github.com/kubext/kubext/api/stable/v1"
	"github.com/kubext/kubext/internal/statuspatch"
	"github.com/kubext/kubext/test/testenv"
)

const finalizer = "test.kubext.io/finalizer"

var k8s client.Client // direct, uncached

func TestMain(m *testing.M) {
	testenv.Main(m, func(_ context.Context, env *testenv.Env) error {
		scheme := runtime.NewScheme()
		if err := errors.Join(clientgoscheme.AddToScheme(scheme), stablev1.AddToScheme(scheme)); err != nil {
			return err
		}
		var err error
		k8s, err = client.New(env.Config, client.Options{Scheme: scheme})
		return err
	})
}

func fields(ct *stablev1.CronTab) (any, *int64) { return ct.Status, &ct.Status.ObservedGeneration }

// newCronTab creates a CronTab of generation 1 with an empty status, and
// returns a writer counting its writes and the CronTab as read.
func newCronTab(f *testenv.Fixture) (client.Client, *atomic.Int64, *stablev1.CronTab) {
	ct := &stablev1.CronTab{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ct-" + f.ID},
		Spec:       stablev1.CronTabSpec{CronSpec: "@hourly", Image: "example.com/job:1"},
	}
	f.Create(ct)
	writes := &atomic.Int64{}
	return testenv.CountWrites(k8s, writes), writes, ct
}

func TestPatchWritesOnlyAChange(t *testing.T) {
	f := testenv.NewFixture(t, k8s)
	c, writes, ct := newCronTab(f)
	ct.Status.ObservedGeneration = ct.Generation
	f.G.Expect(k8s.Status().Update(f.Ctx, ct)).To(Succeed())

	p := statuspatch.New(c, ct, fields)
	f.G.Expect(p.Patch(f.Ctx, ct, nil)).To(Succeed())
	f.G.Expect(writes.Load()).To(BeZero(), "nothing changed: nothing is written")

	ct.Status.Replicas = 3
	f.G.Expect(p.Patch(f.Ctx, ct, nil)).To(Succeed())
	f.G.Expect(writes.Load()).To(Equal(int64(1)))
	// A second Patch of the same reconcile compares with what it wrote.
	f.G.Expect(p.Patch(f.Ctx, ct, nil)).To(Succeed())
	f.G.Expect(writes.Load()).To(Equal(int64(1)))
	got := f.Get(client.ObjectKeyFromObject(ct), &stablev1.CronTab{}).(*stablev1.CronTab)
	f.G.Expect(got.Status.Replicas).To(Equal(int32(3)))
}

func TestPatchObservedGeneration(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		unfinish bool
		observed bool
	}{
		{name: "success", observed: true},
		{name: "terminal", err: reconcile.TerminalError(errors.New("no")), observed: true},
		{name: "refused, wrapped", err: fmt.Errorf("step: %w", statuspatch.Refused("InvalidSpec", nil, "bad")), observed: true},
		{name: "transient", err: errors.New("API server away")},
		{name: "failed", err: statuspatch.Failed("ApplyFailed", errors.New("timeout"), "will retry")},
		{name: "unfinished", unfinish: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := testenv.NewFixture(t, k8s)
			c, _, ct := newCronTab(f)
			p := statuspatch.New(c, ct, fields)
			ct.Status.Replicas = 2 // something to write either way
			if tc.unfinish {
				f.G.Expect(p.PatchUnfinished(f.Ctx, ct)).To(Succeed())
			} else {
				f.G.Expect(p.Patch(f.Ctx, ct, tc.err)).To(Succeed())
			}
			got := f.Get(client.ObjectKeyFromObject(ct), &stablev1.CronTab{}).(*stablev1.CronTab)
			want := int64(0)
			if tc.observed {
				want = ct.Generation
			}
			f.G.Expect(got.Status.ObservedGeneration).To(Equal(want))
			f.G.Expect(got.Status.Replicas).To(Equal(int32(2)))
		})
	}
}

// A status computed from a version someone else has since changed is not
// written over theirs.
func TestPatchConflict(t *testing.T) {
	f := testenv.NewFixture(t, k8s)
	c, _, ct := newCronTab(f)
	p := statuspatch.New(c, ct, fields)

	other := ct.DeepCopy()
	other.Status.Active = 7
	f.G.Expect(k8s.Status().Update(f.Ctx, other)).To(Succeed())

	ct.Status.Replicas = 2
	err := p.Patch(f.Ctx, ct, nil)
	f.G.Expect(apierrors.IsConflict(err)).To(BeTrue(), "%v", err)
	f.G.Expect(err).To(MatchError(ContainSubstring(ct.Name)))
	got := f.Get(client.ObjectKeyFromObject(ct), &stablev1.CronTab{}).(*stablev1.CronTab)
	f.G.Expect(got.Status.Active).To(Equal(int32(7)))
	f.G.Expect(got.Status.Replicas).To(BeZero())
}

func TestPatchGone(t *testing.T) {
	f := testenv.NewFixture(t, k8s)
	c, _, ct := newCronTab(f)
	p := statuspatch.New(c, ct, fields)
	f.G.Expect(k8s.Delete(f.Ctx, ct)).To(Succeed())
	ct.Status.Replicas = 2
	f.G.Expect(p.Patch(f.Ctx, ct, nil)).To(Succeed())
}

func TestFinalizers(t *testing.T) {
	f := testenv.NewFixture(t, k8s)
	c, writes, ct := newCronTab(f)
	key := client.ObjectKeyFromObject(ct)

	added, err := statuspatch.AddFinalizer(f.Ctx, c, ct, finalizer)
	f.G.Expect(err).NotTo(HaveOccurred())
	f.G.Expect(added).To(BeTrue())
	f.G.Expect(f.Get(key, &stablev1.CronTab{}).GetFinalizers()).To(ConsistOf(finalizer))
	added, err = statuspatch.AddFinalizer(f.Ctx, c, ct, finalizer)
	f.G.Expect(err).NotTo(HaveOccurred())
	f.G.Expect(added).To(BeFalse())
	f.G.Expect(writes.Load()).To(Equal(int64(1)))

	// Over a stale copy, neither is written: someone else's finalizer
	// added meanwhile would be lost.
	stale := ct.DeepCopy()
	f.G.Expect(k8s.Patch(f.Ctx, ct, testenv.MergePatch(`{"metadata":{"finalizers":["`+finalizer+`","someone.else/keep"]}}`))).To(Succeed())
	err = statuspatch.RemoveFinalizer(f.Ctx, c, stale, finalizer)
	f.G.Expect(apierrors.IsConflict(err)).To(BeTrue(), "%v", err)
	f.G.Expect(f.Get(key, &stablev1.CronTab{}).GetFinalizers()).To(ConsistOf(finalizer, "someone.else/keep"))

	f.G.Expect(statuspatch.RemoveFinalizer(f.Ctx, c, ct, finalizer)).To(Succeed())
	f.G.Expect(f.Get(key, &stablev1.CronTab{}).GetFinalizers()).To(ConsistOf("someone.else/keep"))

	// Gone meanwhile: nothing left to do.
	f.G.Expect(k8s.Patch(f.Ctx, ct, testenv.MergePatch(`{"metadata":{"finalizers":null}}`))).To(Succeed())
	f.G.Expect(k8s.Delete(f.Ctx, ct)).To(Succeed())
	ct.Finalizers = []string{finalizer}
	f.G.Expect(statuspatch.RemoveFinalizer(f.Ctx, c, ct, finalizer)).To(Succeed())
}

func TestError(t *testing.T) {
	g := NewWithT(t)
	cause := errors.New("refused by the API server")
	refused := fmt.Errorf("apply: %w", statuspatch.Refused("Rejected", cause, "the API server refused it: %v", cause))
	g.Expect(statuspatch.As(refused)).To(HaveField("Reason", "Rejected"))
	g.Expect(statuspatch.As(refused).Message).To(Equal("the API server refused it: refused by the API server"))
	g.Expect(errors.Is(refused, reconcile.TerminalError(nil))).To(BeTrue())
	g.Expect(errors.Is(refused, cause)).To(BeTrue())
	g.Expect(statuspatch.Finished(refused)).To(BeTrue())

	failed := statuspatch.Failed("ApplyFailed", cause, "writing failed, will retry")
	g.Expect(errors.Is(failed, reconcile.TerminalError(nil))).To(BeFalse())
	g.Expect(errors.Is(failed, cause)).To(BeTrue())
	g.Expect(statuspatch.Finished(failed)).To(BeFalse())

	g.Expect(statuspatch.As(cause)).To(BeNil())
	g.Expect(statuspatch.Finished(nil)).To(BeTrue())
}
