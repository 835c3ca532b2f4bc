package crontab

import (
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	stablev1 "github.com/kubext/kubext/api/stable/v1"
)

func TestObserve(t *testing.T) {
	last := metav1.Now()
	for _, tc := range []struct {
		name    string
		cj      batchv1.CronJob
		reason  string
		message string
		active  int32
		pods    int32
	}{{
		name:    "scheduled",
		cj:      batchv1.CronJob{Spec: batchv1.CronJobSpec{Schedule: "@hourly", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](2)}}}},
		reason:  stablev1.ReasonScheduled,
		message: `CronJob nightly runs "@hourly", 2 pod(s) per run`,
		pods:    2,
	}, {
		name: "suspended, one run going on",
		cj: batchv1.CronJob{Spec: batchv1.CronJobSpec{Schedule: "@hourly", Suspend: ptr.To(true)},
			Status: batchv1.CronJobStatus{Active: []corev1.ObjectReference{{Name: "nightly-1"}}, LastScheduleTime: &last}},
		reason:  stablev1.ReasonSuspended,
		message: "CronJob nightly is suspended: no new runs start until spec.suspend is false",
		active:  1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ct := &stablev1.CronTab{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Generation: 4}}
			tc.cj.Name = "nightly"
			observe(ct, &tc.cj)
			ready := meta.FindStatusCondition(ct.Status.Conditions, stablev1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(ready.Reason).To(Equal(tc.reason))
			g.Expect(ready.Message).To(Equal(tc.message))
			g.Expect(ready.ObservedGeneration).To(Equal(int64(4)))
			g.Expect(ct.Status.Active).To(Equal(tc.active))
			g.Expect(ct.Status.Replicas).To(Equal(tc.pods))
			g.Expect(ct.Status.LastScheduleTime).To(Equal(tc.cj.Status.LastScheduleTime))
		})
	}
}
