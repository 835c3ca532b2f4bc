package pulsarconsumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
	"github.com/kubext/kubext/internal/ownedapply"
	"github.com/kubext/kubext/internal/statuspatch"
)

const (
	// FieldOwner is the server-side apply field manager of the Deployments:
	// it owns exactly the fields desiredDeployment sets.
	FieldOwner = "kubext-pulsarconsumer"

	// ContainerName names the consumer's container in each pod.
	ContainerName = "consumer"

	// Command is the consumer program in kubext's image.
	Command = "/pulsar-consumer"

	// healthPort serves the consumer's /readyz, /healthz and /metrics.
	healthPort = 8080

	// nameTakenRetry is how often a PulsarConsumer whose name is taken by a
	// Deployment it does not control looks again.
	nameTakenRetry = time.Minute
)

// reconcileDeployment makes the PulsarConsumer's Deployment match its spec,
// writing only when one of the fields kubext owns differs (a change of
// spec, an edit by hand, a missing Deployment). It returns the Deployment as
// it now stands, or as it stood when writing failed (nil if there is none
// of ours), and a *statuspatch.Error when it could not write (wrapping
// ownedapply.ErrNotControlled when a Deployment of the name is not the
// PulsarConsumer's).
func (r *Reconciler) reconcileDeployment(ctx context.Context, pc *pulsarv1.PulsarConsumer) (*appsv1.Deployment, error) {
	dep, result, err := ownedapply.Apply(ctx, r.Client, FieldOwner, pc, pc.Status.ObservedGeneration,
		desiredDeployment(pc, r.image(pc)), appsv1ac.ExtractDeployment)
	var write *ownedapply.WriteError
	switch {
	case errors.Is(err, ownedapply.ErrNotControlled):
		return nil, statuspatch.Failed(pulsarv1.ReasonDeploymentExists, err,
			"Deployment %s exists and is not controlled by this PulsarConsumer; "+
				"delete or rename that Deployment, or rename the PulsarConsumer", pc.Name)
	case errors.As(err, &write) && write.Rejected:
		r.Recorder.Eventf(pc, nil, corev1.EventTypeWarning, pulsarv1.ReasonDeploymentRejected, "Apply",
			"The API server refused the Deployment: %v", write.Err)
		return dep, statuspatch.Refused(pulsarv1.ReasonDeploymentRejected, write.Err,
			"The API server refused the Deployment: %v", write.Err)
	case errors.As(err, &write):
		return dep, statuspatch.Failed(pulsarv1.ReasonApplyFailed, write.Err,
			"Writing Deployment %s failed, will retry: %v", pc.Name, write.Err)
	case err != nil:
		return nil, fmt.Errorf("applying Deployment %s/%s: %w", pc.Namespace, pc.Name, err)
	}
	created := ""
	if result == ownedapply.Created {
		created = fmt.Sprintf(": %d consumer(s) of %s on %s, subscription %s (%s)",
			*dep.Spec.Replicas, pc.Spec.Topic, pc.Spec.ServerAddress, pc.Spec.SubscriptionName, pc.Spec.SubscriptionType)
	}
	deploymentReport.Record(r.Recorder, pc, dep, result, created)
	return dep, nil
}

// deploymentReport words the Events of the Deployments' writes.
var deploymentReport = ownedapply.Report{Kind: "Deployment", OwnerKind: "PulsarConsumer"}

func (r *Reconciler) image(pc *pulsarv1.PulsarConsumer) string {
	switch {
	case pc.Spec.Image != "":
		return pc.Spec.Image
	case r.Image != "":
		return r.Image
	}
	return DefaultImage()
}

// replicas is spec.replicas, which the API server defaults to 1.
func replicas(pc *pulsarv1.PulsarConsumer) int32 {
	if pc.Spec.Replicas == nil {
		return 1
	}
	return *pc.Spec.Replicas
}

// desiredDeployment is the Deployment that runs a PulsarConsumer: every
// field kubext owns on it, and nothing else, so that defaults the API
// server fills in are never taken for a difference. The consumer is
// configured through its environment only.
func desiredDeployment(pc *pulsarv1.PulsarConsumer, image string) *appsv1ac.DeploymentApplyConfiguration {
	// The selector is immutable: it depends on the name alone, which never
	// changes, so no spec change can require a new one.
	selector := map[string]string{pulsarv1.LabelConsumer: pc.Name}
	labels := map[string]string{
		"app.kubernetes.io/name":       "pulsar-consumer",
		"app.kubernetes.io/instance":   pc.Name,
		"app.kubernetes.io/managed-by": "kubext",
		pulsarv1.LabelConsumer:         pc.Name,
	}
	env := []*corev1ac.EnvVarApplyConfiguration{
		corev1ac.EnvVar().WithName(pulsarv1.EnvServerAddress).WithValue(pc.Spec.ServerAddress),
		corev1ac.EnvVar().WithName(pulsarv1.EnvTopic).WithValue(pc.Spec.Topic),
		corev1ac.EnvVar().WithName(pulsarv1.EnvSubscription).WithValue(pc.Spec.SubscriptionName),
		corev1ac.EnvVar().WithName(pulsarv1.EnvSubscriptionType).WithValue(string(pc.Spec.SubscriptionType)),
		// apiVersion is what the API server would default it to; left out,
		// the API server records it as applied by kubext, and every
		// reconcile would see a difference.
		corev1ac.EnvVar().WithName(pulsarv1.EnvConsumerName).WithValueFrom(corev1ac.EnvVarSource().
			WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("metadata.name"))),
		corev1ac.EnvVar().WithName(pulsarv1.EnvHealthAddress).WithValue(fmt.Sprintf(":%d", healthPort)),
	}
	container := corev1ac.Container().
		WithName(ContainerName).
		WithImage(image).
		WithCommand(Command).
		WithEnv(env...).
		WithPorts(corev1ac.ContainerPort().WithName("http").WithContainerPort(healthPort).WithProtocol(corev1.ProtocolTCP)).
		// Ready means subscribed: readyReplicas counts consumers attached
		// to the subscription, not processes started.
		WithReadinessProbe(corev1ac.Probe().WithHTTPGet(corev1ac.HTTPGetAction().
			WithPath("/readyz").WithPort(intstr.FromString("http")))).
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(false).
			WithReadOnlyRootFilesystem(true).
			WithRunAsNonRoot(true).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")))
	if res := pc.Spec.Resources; res != nil && (len(res.Limits) > 0 || len(res.Requests) > 0) {
		rac := corev1ac.ResourceRequirements()
		if len(res.Limits) > 0 {
			rac.WithLimits(res.Limits)
		}
		if len(res.Requests) > 0 {
			rac.WithRequests(res.Requests)
		}
		container.WithResources(rac)
	}

	return appsv1ac.Deployment(pc.Name, pc.Namespace).
		WithLabels(labels).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(pulsarv1.GroupVersion.String()).
			WithKind("PulsarConsumer").
			WithName(pc.Name).
			WithUID(pc.UID).
			WithController(true).
			WithBlockOwnerDeletion(true)).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(replicas(pc)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selector)).
			// A rolling update runs old and new consumers side by side,
			// which the broker refuses when the subscription type changes
			// (and always for Exclusive): new pods would never subscribe,
			// so never be ready, and the rollout would stall. Consumers
			// serve no requests; messages wait in the subscription for the
			// seconds a restart takes.
			WithStrategy(appsv1ac.DeploymentStrategy().WithType(appsv1.RecreateDeploymentStrategyType)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(corev1ac.PodSpec().
					// The consumer does not talk to the Kubernetes API.
					WithAutomountServiceAccountToken(false).
					WithSecurityContext(corev1ac.PodSecurityContext().
						WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
					WithContainers(container))))
}
