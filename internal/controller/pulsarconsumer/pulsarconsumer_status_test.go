package pulsarconsumer

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
	"github.com/kubext/kubext/internal/statuspatch"
)

// reasons are the Available, Progressing and Degraded reasons and statuses
// a status shows, in that order.
type reasons [3]string

func shown(pc *pulsarv1.PulsarConsumer) reasons {
	var r reasons
	for i, t := range []string{pulsarv1.ConditionAvailable, pulsarv1.ConditionProgressing, pulsarv1.ConditionDegraded} {
		if c := meta.FindStatusCondition(pc.Status.Conditions, t); c != nil {
			r[i] = string(c.Status) + "/" + c.Reason
		}
	}
	return r
}

func deployment(generation int64, status appsv1.DeploymentStatus) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Generation: generation},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{pulsarv1.LabelConsumer: "orders"}}},
		Status: status,
	}
}

func depCondition(t appsv1.DeploymentConditionType, s corev1.ConditionStatus, reason string) appsv1.DeploymentCondition {
	return appsv1.DeploymentCondition{Type: t, Status: s, Reason: reason, Message: "m"}
}

// rollout is a Deployment its controller has seen (generation 2) with
// replicas pods, updated of the current spec, available of them available,
// Available True and Progressing True for reason progressing.
func rollout(replicas, updated, available int32, progressing string) *appsv1.Deployment {
	return deployment(2, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: replicas, UpdatedReplicas: updated, AvailableReplicas: available,
		Conditions: []appsv1.DeploymentCondition{
			depCondition(appsv1.DeploymentAvailable, corev1.ConditionTrue, "MinimumReplicasAvailable"),
			depCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, progressing)}})
}

func TestObserve(t *testing.T) {
	for _, tc := range []struct {
		name string
		dep  *appsv1.Deployment
		want reasons
	}{{
		name: "not reported yet",
		dep:  deployment(1, appsv1.DeploymentStatus{}),
		want: reasons{"Unknown/DeploymentPending", "True/RolloutPending", "False/AsExpected"},
	}, {
		name: "all available",
		dep:  rollout(3, 3, 3, "NewReplicaSetAvailable"),
		want: reasons{"True/MinimumReplicasAvailable", "False/RolloutComplete", "False/AsExpected"},
	}, {
		name: "rolling out",
		dep:  rollout(4, 1, 3, "ReplicaSetUpdated"),
		want: reasons{"True/MinimumReplicasAvailable", "True/ReplicaSetUpdated", "False/AsExpected"},
	}, {
		name: "scaling after a complete rollout",
		dep:  rollout(2, 2, 2, "NewReplicaSetAvailable"),
		want: reasons{"True/MinimumReplicasAvailable", "True/Scaling", "False/AsExpected"},
	}, {
		name: "deadline exceeded",
		dep: deployment(2, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{
				depCondition(appsv1.DeploymentAvailable, corev1.ConditionFalse, "MinimumReplicasUnavailable"),
				depCondition(appsv1.DeploymentProgressing, corev1.ConditionFalse, "ProgressDeadlineExceeded")}}),
		want: reasons{"False/MinimumReplicasUnavailable", "False/ProgressDeadlineExceeded", "True/ProgressDeadlineExceeded"},
	}, {
		name: "pods refused, reason-less condition by hand",
		dep: deployment(2, appsv1.DeploymentStatus{ObservedGeneration: 2,
			Conditions: []appsv1.DeploymentCondition{
				depCondition(appsv1.DeploymentAvailable, corev1.ConditionFalse, ""),
				depCondition(appsv1.DeploymentReplicaFailure, corev1.ConditionTrue, "FailedCreate")}}),
		want: reasons{"False/Unspecified", "True/Scaling", "True/FailedCreate"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			pc := &pulsarv1.PulsarConsumer{ObjectMeta: metav1.ObjectMeta{Name: "orders", Generation: 5}}
			observe(pc, tc.dep)
			g.Expect(shown(pc)).To(Equal(tc.want))
			g.Expect(pc.Status.Selector).To(Equal(pulsarv1.LabelConsumer + "=orders"))
			for _, c := range pc.Status.Conditions {
				g.Expect(c.ObservedGeneration).To(Equal(int64(5)), c.Type)
			}
		})
	}
}

func TestReportFailure(t *testing.T) {
	failure := statuspatch.Failed(pulsarv1.ReasonApplyFailed, errors.New("timeout"), "Writing Deployment orders failed, will retry: timeout")
	for _, tc := range []struct {
		name         string
		noDeployment bool
		want         reasons
		replicas     int32
	}{
		{name: "no Deployment of ours", noDeployment: true, replicas: 0,
			want: reasons{"False/ApplyFailed", "False/ApplyFailed", "True/ApplyFailed"}},
		{name: "the Deployment as it stood", replicas: 3,
			want: reasons{"True/MinimumReplicasAvailable", "False/RolloutComplete", "True/ApplyFailed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			pc := &pulsarv1.PulsarConsumer{ObjectMeta: metav1.ObjectMeta{Name: "orders", Generation: 1}}
			observe(pc, deployment(1, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 3,
				Conditions: []appsv1.DeploymentCondition{depCondition(appsv1.DeploymentAvailable, corev1.ConditionTrue, "MinimumReplicasAvailable")}}))
			reportFailure(pc, failure, tc.noDeployment)
			g.Expect(shown(pc)).To(Equal(tc.want))
			g.Expect(pc.Status.Replicas).To(Equal(tc.replicas))
			g.Expect(meta.FindStatusCondition(pc.Status.Conditions, pulsarv1.ConditionDegraded).Message).To(Equal(failure.Message))
		})
	}
}
