package pulsarconsumer

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
	"github.com/kubext/kubext/internal/statuspatch"
)

// observe sets the status from what the Deployment reports: its replica
// counts, its selector, and Available, Progressing and Degraded from its
// conditions.
func observe(pc *pulsarv1.PulsarConsumer, dep *appsv1.Deployment) {
	pc.Status.Replicas = dep.Status.Replicas
	pc.Status.ReadyReplicas = dep.Status.ReadyReplicas
	pc.Status.AvailableReplicas = dep.Status.AvailableReplicas
	pc.Status.Selector = metav1.FormatLabelSelector(dep.Spec.Selector)

	available := deploymentCondition(dep, appsv1.DeploymentAvailable)
	progressing := deploymentCondition(dep, appsv1.DeploymentProgressing)
	replicaFailure := deploymentCondition(dep, appsv1.DeploymentReplicaFailure)
	seen := dep.Status.ObservedGeneration >= dep.Generation
	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}

	if available != nil {
		setCondition(pc, pulsarv1.ConditionAvailable, available.Status, available.Reason,
			"Deployment %s: %s", dep.Name, available.Message)
	} else {
		setCondition(pc, pulsarv1.ConditionAvailable, metav1.ConditionUnknown, pulsarv1.ReasonDeploymentPending,
			"Deployment %s has not reported its availability yet", dep.Name)
	}

	switch {
	case !seen:
		setCondition(pc, pulsarv1.ConditionProgressing, metav1.ConditionTrue, pulsarv1.ReasonRolloutPending,
			"Deployment %s changed; the Deployment controller has not acted on it yet", dep.Name)
	case progressing != nil && progressing.Status == corev1.ConditionFalse:
		// The rollout gave up (ProgressDeadlineExceeded): nothing is
		// progressing any more, which Degraded reports too.
		setCondition(pc, pulsarv1.ConditionProgressing, metav1.ConditionFalse, progressing.Reason,
			"Deployment %s: %s", dep.Name, progressing.Message)
	case dep.Status.UpdatedReplicas == want && dep.Status.Replicas == want && dep.Status.AvailableReplicas == want:
		setCondition(pc, pulsarv1.ConditionProgressing, metav1.ConditionFalse, pulsarv1.ReasonRolloutComplete,
			"Deployment %s: %d of %d consumer(s) run the current spec and are available", dep.Name, want, want)
	case progressing != nil && progressing.Reason != "NewReplicaSetAvailable":
		// Rolling out a new spec (ReplicaSetUpdated, NewReplicaSetCreated,
		// FoundNewReplicaSet).
		setCondition(pc, pulsarv1.ConditionProgressing, metav1.ConditionTrue, progressing.Reason,
			"Deployment %s: %s (%d of %d updated, %d available)", dep.Name, progressing.Message,
			dep.Status.UpdatedReplicas, want, dep.Status.AvailableReplicas)
	default:
		// The Deployment reports its last rollout complete: what is left
		// is replicas coming and going.
		setCondition(pc, pulsarv1.ConditionProgressing, metav1.ConditionTrue, pulsarv1.ReasonScaling,
			"Deployment %s: %d consumer(s) exist, %d available, %d requested", dep.Name,
			dep.Status.Replicas, dep.Status.AvailableReplicas, want)
	}

	switch {
	case replicaFailure != nil && replicaFailure.Status == corev1.ConditionTrue:
		setCondition(pc, pulsarv1.ConditionDegraded, metav1.ConditionTrue, replicaFailure.Reason,
			"Deployment %s cannot create pods: %s", dep.Name, replicaFailure.Message)
	case seen && progressing != nil && progressing.Status == corev1.ConditionFalse:
		setCondition(pc, pulsarv1.ConditionDegraded, metav1.ConditionTrue, progressing.Reason,
			"Deployment %s: %s", dep.Name, progressing.Message)
	default:
		setCondition(pc, pulsarv1.ConditionDegraded, metav1.ConditionFalse, pulsarv1.ReasonAsExpected,
			"Deployment %s matches the spec", dep.Name)
	}
}

// reportFailure sets the conditions of a reconcile that could not write
// the Deployment. With no Deployment of ours to observe, no consumer runs.
func reportFailure(pc *pulsarv1.PulsarConsumer, f *statuspatch.Error, noDeployment bool) {
	if noDeployment {
		pc.Status.Replicas, pc.Status.ReadyReplicas, pc.Status.AvailableReplicas = 0, 0, 0
		pc.Status.Selector = ""
		setCondition(pc, pulsarv1.ConditionAvailable, metav1.ConditionFalse, f.Reason, "%s", f.Message)
		setCondition(pc, pulsarv1.ConditionProgressing, metav1.ConditionFalse, f.Reason, "%s", f.Message)
	}
	setCondition(pc, pulsarv1.ConditionDegraded, metav1.ConditionTrue, f.Reason, "%s", f.Message)
}

func deploymentCondition(dep *appsv1.Deployment, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range dep.Status.Conditions {
		if dep.Status.Conditions[i].Type == t {
			return &dep.Status.Conditions[i]
		}
	}
	return nil
}

// setCondition sets one condition for the current generation. Its status
// is a metav1 or a core/v1 (Deployment) condition status, which take the
// same values.
func setCondition[S ~string](pc *pulsarv1.PulsarConsumer, t string, status S, reason, format string, args ...any) {
	if reason == "" {
		// A condition needs a reason; a Deployment condition written by
		// hand may have none.
		reason = pulsarv1.ReasonUnspecified
	}
	meta.SetStatusCondition(&pc.Status.Conditions, metav1.Condition{
		Type:               t,
		Status:             metav1.ConditionStatus(status),
		Reason:             reason,
		Message:            fmt.Sprintf(format, args...),
		ObservedGeneration: pc.Generation,
	})
}
