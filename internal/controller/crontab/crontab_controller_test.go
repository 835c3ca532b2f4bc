package crontab

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	stablev1 "github.com/kubext/kubext/api/stable/v1"
)

const ns = "default"

// fixture names objects uniquely per test so tests share one API server.
type fixture struct {
	t   *testing.T
	g   *WithT
	ctx context.Context
	id  string
}

func newFixture(t *testing.T) *fixture {
	return &fixture{t: t, g: NewWithT(t), ctx: context.Background(), id: rand.String(5)}
}

// cronTab creates a CronTab and returns its key.
func (f *fixture) cronTab(name string, spec stablev1.CronTabSpec) client.ObjectKey {
	f.t.Helper()
	ct := &stablev1.CronTab{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + f.id}, Spec: spec}
	f.g.Expect(k8s.Create(f.ctx, ct)).To(Succeed())
	f.t.Cleanup(func() { _ = k8s.Delete(context.Background(), ct) })
	return client.ObjectKeyFromObject(ct)
}

func (f *fixture) get(key client.ObjectKey, o client.Object) client.Object {
	f.t.Helper()
	f.g.Expect(k8s.Get(f.ctx, key, o)).To(Succeed())
	return o
}

// cronJob waits until the CronTab's CronJob satisfies match and returns it.
func (f *fixture) cronJob(key client.ObjectKey, match func(g Gomega, cj *batchv1.CronJob)) *batchv1.CronJob {
	f.t.Helper()
	cj := &batchv1.CronJob{}
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, key, cj)).To(Succeed())
		match(g, cj)
	}, waitFor, 50*time.Millisecond).Should(Succeed())
	return cj
}

// ready waits until the CronTab's Ready condition has the reason, for its
// current generation, and returns the CronTab.
func (f *fixture) ready(key client.ObjectKey, status metav1.ConditionStatus, reason string) *stablev1.CronTab {
	f.t.Helper()
	ct := &stablev1.CronTab{}
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, key, ct)).To(Succeed())
		c := meta.FindStatusCondition(ct.Status.Conditions, stablev1.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(status), c.Message)
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		g.Expect(c.ObservedGeneration).To(Equal(ct.Generation))
	}, waitFor, 50*time.Millisecond).Should(Succeed())
	return ct
}

// event waits for an Event with the reason about the CronTab.
func (f *fixture) event(key client.ObjectKey, reason string) *eventsv1.Event {
	f.t.Helper()
	var found *eventsv1.Event
	f.g.Eventually(func(g Gomega) {
		events := &eventsv1.EventList{}
		g.Expect(k8s.List(f.ctx, events, client.InNamespace(ns))).To(Succeed())
		for i, e := range events.Items {
			if e.Regarding.Kind == "CronTab" && e.Regarding.Name == key.Name && e.Reason == reason {
				found = &events.Items[i]
			}
		}
		g.Expect(found).NotTo(BeNil(), "no %s event for %s", reason, key.Name)
	}, waitFor, 100*time.Millisecond).Should(Succeed())
	return found
}

func mergePatch(s string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(s)) }

func spec(cron, image string, replicas int32) stablev1.CronTabSpec {
	return stablev1.CronTabSpec{CronSpec: cron, Image: image, Replicas: replicas}
}

func TestCreatesCronJob(t *testing.T) {
	f := newFixture(t)
	key := f.cronTab("nightly", spec("* * * * */5", "registry.example.com/report:1.4.2", 2))

	cj := f.cronJob(key, func(g Gomega, cj *batchv1.CronJob) {})
	f.g.Expect(cj.Spec.Schedule).To(Equal("* * * * */5"))
	f.g.Expect(*cj.Spec.Suspend).To(BeFalse())
	f.g.Expect(cj.Spec.ConcurrencyPolicy).To(Equal(batchv1.AllowConcurrent))
	job := cj.Spec.JobTemplate.Spec
	f.g.Expect(*job.Parallelism).To(Equal(int32(2)))
	f.g.Expect(*job.Completions).To(Equal(int32(2)))
	f.g.Expect(job.Template.Spec.RestartPolicy).To(Equal(corev1.RestartPolicyOnFailure))
	f.g.Expect(job.Template.Spec.Containers).To(HaveLen(1))
	f.g.Expect(job.Template.Spec.Containers[0].Image).To(Equal("registry.example.com/report:1.4.2"))
	for _, labels := range []map[string]string{cj.Labels, cj.Spec.JobTemplate.Labels, job.Template.Labels} {
		f.g.Expect(labels).To(HaveKeyWithValue(stablev1.LabelCronTab, key.Name))
	}

	// envtest runs no garbage collector: the owner reference is what makes
	// the CronJob go with its CronTab in a cluster.
	ct := f.get(key, &stablev1.CronTab{}).(*stablev1.CronTab)
	owner := metav1.GetControllerOf(cj)
	f.g.Expect(owner).NotTo(BeNil())
	f.g.Expect(owner.UID).To(Equal(ct.UID))
	f.g.Expect(owner.Kind).To(Equal("CronTab"))
	f.g.Expect(owner.APIVersion).To(Equal("stable.example.com/v1"))
	f.g.Expect(owner.BlockOwnerDeletion).To(HaveValue(BeTrue()))

	ct = f.ready(key, metav1.ConditionTrue, stablev1.ReasonScheduled)
	f.g.Expect(ct.Status.ObservedGeneration).To(Equal(ct.Generation))
	f.g.Expect(ct.Status.Replicas).To(Equal(int32(2)))
	f.g.Expect(ct.Status.Active).To(BeZero())
	f.g.Expect(ct.Spec.ConcurrencyPolicy).To(Equal(stablev1.ConcurrencyAllow), "defaulted by the API server")
	e := f.event(key, "Created")
	f.g.Expect(e.Related).NotTo(BeNil())
	f.g.Expect(e.Related.Kind).To(Equal("CronJob"))
	f.g.Expect(e.Related.Name).To(Equal(key.Name))
	f.g.Expect(e.Note).To(ContainSubstring("registry.example.com/report:1.4.2"))
}

func TestSpecChangeUpdatesCronJob(t *testing.T) {
	f := newFixture(t)
	key := f.cronTab("report", spec("*/5 * * * *", "report:1.0", 1))
	f.ready(key, metav1.ConditionTrue, stablev1.ReasonScheduled)

	// What `kubectl patch ct report --type=merge -p ...` sends.
	ct := &stablev1.CronTab{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}
	f.g.Expect(k8s.Patch(f.ctx, ct, mergePatch(`{"spec":{"cronSpec":"0 3 * * MON-FRI","image":"report:1.1","replicas":3,`+
		`"timeZone":"Etc/UTC","concurrencyPolicy":"Forbid"}}`))).To(Succeed())
	f.cronJob(key, func(g Gomega, cj *batchv1.CronJob) {
		g.Expect(cj.Spec.Schedule).To(Equal("0 3 * * MON-FRI"))
		g.Expect(cj.Spec.TimeZone).To(HaveValue(Equal("Etc/UTC")))
		g.Expect(cj.Spec.ConcurrencyPolicy).To(Equal(batchv1.ForbidConcurrent))
		g.Expect(cj.Spec.JobTemplate.Spec.Parallelism).To(HaveValue(Equal(int32(3))))
		g.Expect(cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image).To(Equal("report:1.1"))
	})
	got := f.ready(key, metav1.ConditionTrue, stablev1.ReasonScheduled)
	f.g.Expect(got.Status.Replicas).To(Equal(int32(3)))
	f.event(key, "Updated")

	// `kubectl scale ct report --replicas=4` goes through the scale subresource.
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 4}}
	f.g.Expect(k8s.SubResource("scale").Update(f.ctx, ct, client.WithSubResourceBody(scale))).To(Succeed())
	f.cronJob(key, func(g Gomega, cj *batchv1.CronJob) {
		g.Expect(cj.Spec.JobTemplate.Spec.Parallelism).To(HaveValue(Equal(int32(4))))
	})
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8s.SubResource("scale").Get(f.ctx, ct, scale)).To(Succeed())
		g.Expect(scale.Status.Replicas).To(Equal(int32(4)))
	}, waitFor).Should(Succeed())

	f.g.Expect(k8s.Patch(f.ctx, ct, mergePatch(`{"spec":{"suspend":true}}`))).To(Succeed())
	f.cronJob(key, func(g Gomega, cj *batchv1.CronJob) { g.Expect(cj.Spec.Suspend).To(HaveValue(BeTrue())) })
	f.ready(key, metav1.ConditionTrue, stablev1.ReasonSuspended)
}

func TestManualEditIsHealed(t *testing.T) {
	f := newFixture(t)
	key := f.cronTab("heal", spec("*/5 * * * *", "heal:1.0", 2))
	cj := f.cronJob(key, func(Gomega, *batchv1.CronJob) {})
	f.ready(key, metav1.ConditionTrue, stablev1.ReasonScheduled)

	// What `kubectl edit cronjob` sends: a patch under another field manager.
	f.g.Expect(k8s.Patch(f.ctx, cj, mergePatch(`{"spec":{"schedule":"0 0 * * *","suspend":true,`+
		`"jobTemplate":{"spec":{"parallelism":9}}}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
	f.cronJob(key, func(g Gomega, cj *batchv1.CronJob) {
		g.Expect(cj.Spec.Schedule).To(Equal("*/5 * * * *"))
		g.Expect(cj.Spec.Suspend).To(HaveValue(BeFalse()))
		g.Expect(cj.Spec.JobTemplate.Spec.Parallelism).To(HaveValue(Equal(int32(2))))
	})
	f.event(key, "Healed")

	// A field kubext does not manage is left as the user set it.
	f.g.Expect(k8s.Patch(f.ctx, cj, mergePatch(`{"spec":{"successfulJobsHistoryLimit":1}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
	f.g.Consistently(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, key, cj)).To(Succeed())
		g.Expect(cj.Spec.SuccessfulJobsHistoryLimit).To(HaveValue(Equal(int32(1))))
	}, time.Second).Should(Succeed())

	// A deleted CronJob comes back.
	uid := cj.UID
	f.g.Expect(k8s.Delete(f.ctx, cj)).To(Succeed())
	f.cronJob(key, func(g Gomega, cj *batchv1.CronJob) { g.Expect(cj.UID).NotTo(Equal(uid)) })
}

// withoutWatch lets the manager's client, which reads from the cache, be
// wrapped by interceptor.NewClient.
type withoutWatch struct{ client.Client }

func (withoutWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("not supported")
}

// countWrites wraps the manager's client, counting every write it makes.
func countWrites(writes *atomic.Int64) client.Client {
	count := func() { writes.Add(1) }
	return interceptor.NewClient(withoutWatch{mgr.GetClient()}, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			count()
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			count()
			return c.Update(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			count()
			return c.Patch(ctx, o, p, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, o runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			count()
			return c.Apply(ctx, o, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			count()
			return c.Delete(ctx, o, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
			count()
			return c.SubResource(sub).Update(ctx, o, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			count()
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, o runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			count()
			return c.SubResource(sub).Apply(ctx, o, opts...)
		},
	})
}

func TestSteadyStateMakesNoWrites(t *testing.T) {
	f := newFixture(t)
	key := f.cronTab("steady", stablev1.CronTabSpec{CronSpec: "30 2 * * *", Image: "steady:1.0", Replicas: 3,
		TimeZone: "Europe/Paris", ConcurrencyPolicy: stablev1.ConcurrencyReplace})
	f.ready(key, metav1.ConditionTrue, stablev1.ReasonScheduled)
	cj := f.cronJob(key, func(Gomega, *batchv1.CronJob) {})
	ct := f.get(key, &stablev1.CronTab{}).(*stablev1.CronTab)

	// Wait for the cache the controller reads to have caught up with the
	// last writes, so that it computes from the same state as the server.
	f.g.Eventually(func(g Gomega) {
		cached := &stablev1.CronTab{}
		g.Expect(mgr.GetClient().Get(f.ctx, key, cached)).To(Succeed())
		g.Expect(cached.ResourceVersion).To(Equal(ct.ResourceVersion))
		cachedJob := &batchv1.CronJob{}
		g.Expect(mgr.GetClient().Get(f.ctx, key, cachedJob)).To(Succeed())
		g.Expect(cachedJob.ResourceVersion).To(Equal(cj.ResourceVersion))
	}, waitFor).Should(Succeed())

	var writes atomic.Int64
	r := &Reconciler{Client: countWrites(&writes), Recorder: mgr.GetEventRecorder("crontab-test")}
	for range 3 {
		_, err := r.Reconcile(f.ctx, reconcile.Request{NamespacedName: key})
		f.g.Expect(err).NotTo(HaveOccurred())
	}
	f.g.Expect(writes.Load()).To(BeZero(), "a reconcile with nothing to change must not write")
	f.g.Expect(f.get(key, &batchv1.CronJob{}).GetResourceVersion()).To(Equal(cj.ResourceVersion))
	f.g.Expect(f.get(key, &stablev1.CronTab{}).GetResourceVersion()).To(Equal(ct.ResourceVersion))

	// The counter counts: a write through the same client is seen. (Drift
	// itself is healed by the running controller; see the healing test.)
	counting := countWrites(&writes)
	f.g.Expect(counting.Patch(f.ctx, cj, mergePatch(`{"metadata":{"annotations":{"test":"x"}}}`))).To(Succeed())
	f.g.Expect(writes.Load()).To(BeEquivalentTo(1))
}

func TestStatusReportsTheCronJob(t *testing.T) {
	f := newFixture(t)
	key := f.cronTab("status", spec("@hourly", "status:1.0", 1))
	cj := f.cronJob(key, func(Gomega, *batchv1.CronJob) {})
	f.ready(key, metav1.ConditionTrue, stablev1.ReasonScheduled)

	// envtest runs no CronJob controller: report two runs in progress as it would.
	scheduled := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	succeeded := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	orig := cj.DeepCopy()
	cj.Status.LastScheduleTime, cj.Status.LastSuccessfulTime = &scheduled, &succeeded
	cj.Status.Active = []corev1.ObjectReference{
		{Kind: "Job", Namespace: ns, Name: key.Name + "-1"},
		{Kind: "Job", Namespace: ns, Name: key.Name + "-2"},
	}
	f.g.Expect(k8s.Status().Patch(f.ctx, cj, client.MergeFrom(orig))).To(Succeed())

	f.g.Eventually(func(g Gomega) {
		ct := &stablev1.CronTab{}
		g.Expect(k8s.Get(f.ctx, key, ct)).To(Succeed())
		g.Expect(ct.Status.Active).To(Equal(int32(2)))
		g.Expect(ct.Status.LastScheduleTime).To(HaveValue(Equal(scheduled)))
		g.Expect(ct.Status.LastSuccessfulTime).To(HaveValue(Equal(succeeded)))
	}, waitFor, 50*time.Millisecond).Should(Succeed())
}

func TestCronJobOfSameNameIsLeftAlone(t *testing.T) {
	f := newFixture(t)
	theirs := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-" + f.id},
		Spec: batchv1.CronJobSpec{Schedule: "0 0 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "theirs", Image: "theirs:1"}}}}}}},
	}
	f.g.Expect(k8s.Create(f.ctx, theirs)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), theirs) })

	key := f.cronTab("taken", spec("*/5 * * * *", "mine:1.0", 1))
	ct := f.ready(key, metav1.ConditionFalse, stablev1.ReasonCronJobExists)
	f.g.Expect(meta.FindStatusCondition(ct.Status.Conditions, stablev1.ConditionReady).Message).To(ContainSubstring("not controlled by this CronTab"))
	got := f.get(key, &batchv1.CronJob{}).(*batchv1.CronJob)
	f.g.Expect(got.ResourceVersion).To(Equal(theirs.ResourceVersion))
}

func TestUnknownTimeZoneIsReported(t *testing.T) {
	f := newFixture(t)
	key := f.cronTab("tz", stablev1.CronTabSpec{CronSpec: "0 9 * * *", Image: "tz:1.0", Replicas: 1, TimeZone: "Mars/Olympus_Mons"})
	ct := f.ready(key, metav1.ConditionFalse, stablev1.ReasonCronJobRejected)
	f.g.Expect(meta.FindStatusCondition(ct.Status.Conditions, stablev1.ConditionReady).Message).To(ContainSubstring("timeZone"))
	f.g.Expect(ct.Status.ObservedGeneration).To(Equal(ct.Generation))

	// Fixing the spec fixes the CronTab.
	f.g.Expect(k8s.Patch(f.ctx, ct, mergePatch(`{"spec":{"timeZone":"America/New_York"}}`))).To(Succeed())
	f.ready(key, metav1.ConditionTrue, stablev1.ReasonScheduled)
}
