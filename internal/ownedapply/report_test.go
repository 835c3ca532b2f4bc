package ownedapply_test

import (
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"github.com/kubext/kubext/internal/ownedapply"
)

func TestReportRecord(t *testing.T) {
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nightly"}}
	obj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nightly"}}
	report := ownedapply.Report{Kind: "CronJob", OwnerKind: "CronTab"}
	for _, tc := range []struct {
		result ownedapply.Result
		want   []string
	}{
		{ownedapply.Unchanged, nil},
		{ownedapply.Created, []string{"Normal Created Created CronJob nightly running x"}},
		{ownedapply.Updated, []string{"Normal Updated Updated CronJob nightly to the CronTab's new spec"}},
		{ownedapply.Healed, []string{"Normal Healed Put back CronJob nightly, changed outside of its CronTab"}},
	} {
		rec := events.NewFakeRecorder(10)
		report.Record(rec, owner, obj, tc.result, " running x")
		close(rec.Events)
		var got []string
		for e := range rec.Events {
			got = append(got, e)
		}
		NewWithT(t).Expect(got).To(Equal(tc.want), "result %d", tc.result)
	}
}
