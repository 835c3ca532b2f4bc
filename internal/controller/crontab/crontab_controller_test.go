package crontab

import (
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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	stablev1 "github.com/kubext/kubext/api/stable/v1"
	"github.com/kubext/kubext/test/testenv"
)

const ns = "default"

// fixture adds to testenv.Fixture what the tests of CronTabs look at.
type fixture struct{ *testenv.Fixture }

func newFixture(t *testing.T) *fixture { return &fixture{testenv.NewFixture(t, k8s)} }

// cronTab creates a CronTab and returns its key.
func (f *fixture) cronTab(name string, spec stablev1.CronTabSpec) client.ObjectKey {
	f.T.Helper()
	return f.Create(&stablev1.CronTab{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + f.ID}, Spec: spec})
}

// cronJob waits until the CronTab's CronJob satisfies match and returns it.
func (f *fixture) cronJob(key client.ObjectKey, match func(g Gomega, cj *batchv1.CronJob)) *batchv1.CronJob {
	f.T.Helper()
	return testenv.Eventually(f.Fixture, key, &batchv1.CronJob{}, func(g Gomega, cj *batchv1.CronJob) {
		testenv.Applied(g, cj)
		match(g, cj)
	})
}

// ready waits until the CronTab's Ready condition has the reason, for its
// current generation, and returns the CronTab.
func (f *fixture) ready(key client.ObjectKey, status metav1.ConditionStatus, reason string) *stablev1.CronTab {
	f.T.Helper()
	return testenv.Eventually(f.Fixture, key, &stablev1.CronTab{}, func(g Gomega, ct *stablev1.CronTab) {
		testenv.HasCondition(g, ct.Status.Conditions, stablev1.ConditionReady, status, reason, ct.Generation)
	})
}

// event waits for an Event with the reason about the CronTab.
func (f *fixture) event(key client.ObjectKey, reason string) *eventsv1.Event {
	f.T.Helper()
	return f.Event("CronTab", key, reason)
}

func spec(cron, image string, replicas int32) stablev1.CronTabSpec {
	return stablev1.CronTabSpec{CronSpec: cron, Image: image, Replicas: replicas}
}

func TestCreatesCronJob(t *testing.T) {
	f := newFixture(t)
	key := f.cronTab("nightly", spec("* * * * */5", "registry.example.com/report:1.4.2", 2))

	cj := f.cronJob(key, func(g Gomega, cj *batchv1.CronJob) {})
	f.G.Expect(cj.Spec.Schedule).To(Equal("* * * * */5"))
	f.G.Expect(*cj.Spec.Suspend).To(BeFalse())
	f.G.Expect(cj.Spec.ConcurrencyPolicy).To(Equal(batchv1.AllowConcurrent))
	job := cj.Spec.JobTemplate.Spec
	f.G.Expect(*job.Parallelism).To(Equal(int32(2)))
	f.G.Expect(*job.Completions).To(Equal(int32(2)))
	f.G.Expect(job.Template.Spec.RestartPolicy).To(Equal(corev1.RestartPolicyOnFailure))
	f.G.Expect(job.Template.Spec.Containers).To(HaveLen(1))
	f.G.Expect(job.Template.Spec.Containers[0].Image).To(Equal("registry.example.com/report:1.4.2"))
	for _, labels := range []map[string]string{cj.Labels, cj.Spec.JobTemplate.Labels, job.Template.Labels} {
		f.G.Expect(labels).To(HaveKeyWithValue(stablev1.LabelCronTab, key.Name))
	}

	// envtest runs no garbage collector: the owner reference is what makes
	// the CronJob go with its CronTab in a cluster.
	ct := f.Get(key, &stablev1.CronTab{}).(*stablev1.CronTab)
	owner := metav1.GetControllerOf(cj)
	f.G.Expect(owner).NotTo(BeNil())
	f.G.Expect(owner.UID).To(Equal(ct.UID))
	f.G.Expect(owner.Kind).To(Equal("CronTab"))
	f.G.Expect(owner.APIVersion).To(Equal("stable.example.com/v1"))
	f.G.Expect(owner.BlockOwnerDeletion).To(HaveValue(BeTrue()))

	ct = f.ready(key, metav1.ConditionTrue, stablev1.ReasonScheduled)
	f.G.Expect(ct.Status.ObservedGeneration).To(Equal(ct.Generation))
	f.G.Expect(ct.Status.Replicas).To(Equal(int32(2)))
	f.G.Expect(ct.Status.Active).To(BeZero())
	f.G.Expect(ct.Spec.ConcurrencyPolicy).To(Equal(stablev1.ConcurrencyAllow), "defaulted by the API server")
	e := f.event(key, "Created")
	f.G.Expect(e.Related).NotTo(BeNil())
	f.G.Expect(e.Related.Kind).To(Equal("CronJob"))
	f.G.Expect(e.Related.Name).To(Equal(key.Name))
	f.G.Expect(e.Note).To(ContainSubstring("registry.example.com/report:1.4.2"))
}

func TestSpecChangeUpdatesCronJob(t *testing.T) {
	f := newFixture(t)
	key := f.cronTab("report", spec("*/5 * * * *", "report:1.0", 1))
	f.ready(key, metav1.ConditionTrue, stablev1.ReasonScheduled)

	// What `kubectl patch ct report --type=merge -p ...` sends.
	ct := &stablev1.CronTab{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}
	f.G.Expect(k8s.Patch(f.Ctx, ct, testenv.MergePatch(`{"spec":{"cronSpec":"0 3 * * MON-FRI","image":"report:1.1","replicas":3,`+
		`"timeZone":"Etc/UTC","concurrencyPolicy":"Forbid"}}`))).To(Succeed())
	f.cronJob(key, func(g Gomega, cj *batchv1.CronJob) {
		g.Expect(cj.Spec.Schedule).To(Equal("0 3 * * MON-FRI"))
		g.Expect(cj.Spec.TimeZone).To(HaveValue(Equal("Etc/UTC")))
		g.Expect(cj.Spec.ConcurrencyPolicy).To(Equal(batchv1.ForbidConcurrent))
		g.Expect(cj.Spec.JobTemplate.Spec.Parallelism).To(HaveValue(Equal(int32(3))))
		g.Expect(cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image).To(Equal("report:1.1"))
	})
	got := f.ready(key, metav1.ConditionTrue, stablev1.ReasonScheduled)
	f.G.Expect(got.Status.Replicas).To(Equal(int32(3)))
	f.event(key, "Updated")

	// `kubectl scale ct report --replicas=4` goes through the scale subresource.
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 4}}
	f.G.Expect(k8s.SubResource("scale").Update(f.Ctx, ct, client.WithSubResourceBody(scale))).To(Succeed())
	f.cronJob(key, func(g Gomega, cj *batchv1.CronJob) {
		g.Expect(cj.Spec.JobTemplate.Spec.Parallelism).To(HaveValue(Equal(int32(4))))
	})
	f.G.Eventually(func(g Gomega) {
		g.Expect(k8s.SubResource("scale").Get(f.Ctx, ct, scale)).To(Succeed())
		g.Expect(scale.Status.Replicas).To(Equal(int32(4)))
	}, testenv.WaitFor).Should(Succeed())

	f.G.Expect(k8s.Patch(f.Ctx, ct, testenv.MergePatch(`{"spec":{"suspend":true}}`))).To(Succeed())
	f.cronJob(key, func(g Gomega, cj *batchv1.CronJob) { g.Expect(cj.Spec.Suspend).To(HaveValue(BeTrue())) })
	f.ready(key, metav1.ConditionTrue, stablev1.ReasonSuspended)
}

func TestManualEditIsHealed(t *testing.T) {
	f := newFixture(t)
	key := f.cronTab("heal", spec("*/5 * * * *", "heal:1.0", 2))
	cj := f.cronJob(key, func(Gomega, *batchv1.CronJob) {})
	f.ready(key, metav1.ConditionTrue, stablev1.ReasonScheduled)

	// What `kubectl edit cronjob` sends: a patch under another field manager.
	f.G.Expect(k8s.Patch(f.Ctx, cj, testenv.MergePatch(`{"spec":{"schedule":"0 0 * * *","suspend":true,`+
		`"jobTemplate":{"spec":{"parallelism":9}}}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
	f.cronJob(key, func(g Gomega, cj *batchv1.CronJob) {
		g.Expect(cj.Spec.Schedule).To(Equal("*/5 * * * *"))
		g.Expect(cj.Spec.Suspend).To(HaveValue(BeFalse()))
		g.Expect(cj.Spec.JobTemplate.Spec.Parallelism).To(HaveValue(Equal(int32(2))))
	})
	f.event(key, "Healed")

	// A field kubext does not manage is left as the user set it.
	f.G.Expect(k8s.Patch(f.Ctx, cj, testenv.MergePatch(`{"spec":{"successfulJobsHistoryLimit":1}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
	f.G.Consistently(func(g Gomega) {
		g.Expect(k8s.Get(f.Ctx, key, cj)).To(Succeed())
		g.Expect(cj.Spec.SuccessfulJobsHistoryLimit).To(HaveValue(Equal(int32(1))))
	}, time.Second).Should(Succeed())

	// A deleted CronJob comes back.
	uid := cj.UID
	f.G.Expect(k8s.Delete(f.Ctx, cj)).To(Succeed())
	f.cronJob(key, func(g Gomega, cj *batchv1.CronJob) { g.Expect(cj.UID).NotTo(Equal(uid)) })
}

func TestSteadyStateMakesNoWrites(t *testing.T) {
	f := newFixture(t)
	key := f.cronTab("steady", stablev1.CronTabSpec{CronSpec: "30 2 * * *", Image: "steady:1.0", Replicas: 3,
		TimeZone: "Europe/Paris", ConcurrencyPolicy: stablev1.ConcurrencyReplace})
	f.ready(key, metav1.ConditionTrue, stablev1.ReasonScheduled)
	cj := f.cronJob(key, func(Gomega, *batchv1.CronJob) {})
	ct := f.Get(key, &stablev1.CronTab{}).(*stablev1.CronTab)

	// Wait for the cache the controller reads to have caught up with the
	// last writes, so that it computes from the same state as the server.
	f.WaitForCache(mgr.GetClient(), ct, cj)

	var writes atomic.Int64
	r := &Reconciler{Client: testenv.CountWrites(mgr.GetClient(), &writes), Recorder: mgr.GetEventRecorder("crontab-test")}
	for range 3 {
		_, err := r.Reconcile(f.Ctx, reconcile.Request{NamespacedName: key})
		f.G.Expect(err).NotTo(HaveOccurred())
	}
	f.G.Expect(writes.Load()).To(BeZero(), "a reconcile with nothing to change must not write")
	f.G.Expect(f.Get(key, &batchv1.CronJob{}).GetResourceVersion()).To(Equal(cj.ResourceVersion))
	f.G.Expect(f.Get(key, &stablev1.CronTab{}).GetResourceVersion()).To(Equal(ct.ResourceVersion))

	// The counter counts: a write through the same client is seen. (Drift
	// itself is healed by the running controller; see the healing test.)
	counting := testenv.CountWrites(mgr.GetClient(), &writes)
	f.G.Expect(counting.Patch(f.Ctx, cj, testenv.MergePatch(`{"metadata":{"annotations":{"test":"x"}}}`))).To(Succeed())
	f.G.Expect(writes.Load()).To(BeEquivalentTo(1))
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
	f.G.Expect(k8s.Status().Patch(f.Ctx, cj, client.MergeFrom(orig))).To(Succeed())

	f.G.Eventually(func(g Gomega) {
		ct := &stablev1.CronTab{}
		g.Expect(k8s.Get(f.Ctx, key, ct)).To(Succeed())
		g.Expect(ct.Status.Active).To(Equal(int32(2)))
		g.Expect(ct.Status.LastScheduleTime).To(HaveValue(Equal(scheduled)))
		g.Expect(ct.Status.LastSuccessfulTime).To(HaveValue(Equal(succeeded)))
	}, testenv.WaitFor, 50*time.Millisecond).Should(Succeed())
}

func TestCronJobOfSameNameIsLeftAlone(t *testing.T) {
	f := newFixture(t)
	theirs := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-" + f.ID},
		Spec: batchv1.CronJobSpec{Schedule: "0 0 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "theirs", Image: "theirs:1"}}}}}}},
	}
	f.Create(theirs)

	key := f.cronTab("taken", spec("*/5 * * * *", "mine:1.0", 1))
	ct := f.ready(key, metav1.ConditionFalse, stablev1.ReasonCronJobExists)
	f.G.Expect(meta.FindStatusCondition(ct.Status.Conditions, stablev1.ConditionReady).Message).To(ContainSubstring("not controlled by this CronTab"))
	got := f.Get(key, &batchv1.CronJob{}).(*batchv1.CronJob)
	f.G.Expect(got.ResourceVersion).To(Equal(theirs.ResourceVersion))
}

func TestUnknownTimeZoneIsReported(t *testing.T) {
	f := newFixture(t)
	key := f.cronTab("tz", stablev1.CronTabSpec{CronSpec: "0 9 * * *", Image: "tz:1.0", Replicas: 1, TimeZone: "Mars/Olympus_Mons"})
	ct := f.ready(key, metav1.ConditionFalse, stablev1.ReasonCronJobRejected)
	f.G.Expect(meta.FindStatusCondition(ct.Status.Conditions, stablev1.ConditionReady).Message).To(ContainSubstring("timeZone"))
	f.G.Expect(ct.Status.ObservedGeneration).To(Equal(ct.Generation))

	// Fixing the spec fixes the CronTab.
	f.G.Expect(k8s.Patch(f.Ctx, ct, testenv.MergePatch(`{"spec":{"timeZone":"America/New_York"}}`))).To(Succeed())
	f.ready(key, metav1.ConditionTrue, stablev1.ReasonScheduled)
}
