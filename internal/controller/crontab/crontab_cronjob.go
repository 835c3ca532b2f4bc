package crontab

import (
	"context"
	"errors"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	stablev1 "github.com/kubext/kubext/api/stable/v1"
	"github.com/kubext/kubext/internal/ownedapply"
)

const (
	// FieldOwner is the server-side apply field manager of the CronJobs:
	// it owns exactly the fields desiredCronJob sets.
	FieldOwner = "kubext-crontab"

	// ContainerName names the one container of each run's pods.
	ContainerName = "crontab"

	// nameTakenRetry is how often a CronTab whose name is taken by a
	// CronJob it does not control looks again.
	nameTakenRetry = time.Minute
)

// reconcileCronJob makes the CronTab's CronJob match its spec, writing only
// when one of the fields kubext owns differs (a change of spec, an edit by
// hand, a missing CronJob). It returns the CronJob as it now stands, or
// ownedapply.ErrNotControlled when a CronJob of the name is not the
// CronTab's.
func (r *Reconciler) reconcileCronJob(ctx context.Context, ct *stablev1.CronTab) (*batchv1.CronJob, error) {
	cj, result, err := ownedapply.Apply(ctx, r.Client, FieldOwner, ct, ct.Status.ObservedGeneration,
		desiredCronJob(ct), batchv1ac.ExtractCronJob)
	var write *ownedapply.WriteError
	switch {
	case errors.Is(err, ownedapply.ErrNotControlled):
		setReady(ct, metav1.ConditionFalse, stablev1.ReasonCronJobExists,
			"CronJob %s exists and is not controlled by this CronTab; delete or rename that CronJob, or rename the CronTab", ct.Name)
		return nil, err
	case errors.As(err, &write) && write.Rejected:
		setReady(ct, metav1.ConditionFalse, stablev1.ReasonCronJobRejected, "The API server refused the CronJob: %v", write.Err)
		r.Recorder.Eventf(ct, nil, corev1.EventTypeWarning, stablev1.ReasonCronJobRejected, "Apply", "The API server refused the CronJob: %v", write.Err)
		return nil, reconcile.TerminalError(write.Err)
	case errors.As(err, &write):
		setReady(ct, metav1.ConditionFalse, stablev1.ReasonApplyFailed, "Writing CronJob %s failed, will retry: %v", ct.Name, write.Err)
		return nil, write.Err
	case err != nil:
		return nil, err
	}
	switch result {
	case ownedapply.Created:
		r.Recorder.Eventf(ct, cj, corev1.EventTypeNormal, "Created", "Apply",
			"Created CronJob %s running %s on %q", ct.Name, ct.Spec.Image, ct.Spec.CronSpec)
	case ownedapply.Updated:
		r.Recorder.Eventf(ct, cj, corev1.EventTypeNormal, "Updated", "Apply",
			"Updated CronJob %s to the CronTab's new spec", ct.Name)
	case ownedapply.Healed:
		r.Recorder.Eventf(ct, cj, corev1.EventTypeNormal, "Healed", "Apply",
			"Put back CronJob %s, changed outside of its CronTab", ct.Name)
	}
	return cj, nil
}

// desiredCronJob is the CronJob that runs a CronTab: every field kubext owns
// on it, and nothing else, so that defaults the API server fills in are
// never taken for a difference.
func desiredCronJob(ct *stablev1.CronTab) *batchv1ac.CronJobApplyConfiguration {
	labels := map[string]string{
		"app.kubernetes.io/name":       "crontab",
		"app.kubernetes.io/instance":   ct.Name,
		"app.kubernetes.io/managed-by": "kubext",
		stablev1.LabelCronTab:          ct.Name,
	}
	// replicas and concurrencyPolicy are never empty: the API server
	// defaults them.
	replicas := ct.Spec.Replicas
	spec := batchv1ac.CronJobSpec().
		WithSchedule(ct.Spec.CronSpec).
		WithSuspend(ct.Spec.Suspend).
		WithConcurrencyPolicy(batchv1.ConcurrencyPolicy(ct.Spec.ConcurrencyPolicy)).
		WithJobTemplate(batchv1ac.JobTemplateSpec().
			WithLabels(labels).
			WithSpec(batchv1ac.JobSpec().
				// Each run is replicas pods at once, all of which must succeed.
				WithParallelism(replicas).
				WithCompletions(replicas).
				WithTemplate(corev1ac.PodTemplateSpec().
					WithLabels(labels).
					WithSpec(corev1ac.PodSpec().
						WithRestartPolicy(corev1.RestartPolicyOnFailure).
						WithContainers(corev1ac.Container().
							WithName(ContainerName).
							WithImage(ct.Spec.Image))))))
	if ct.Spec.TimeZone != "" {
		spec.WithTimeZone(ct.Spec.TimeZone)
	}
	return batchv1ac.CronJob(ct.Name, ct.Namespace).
		WithLabels(labels).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(stablev1.GroupVersion.String()).
			WithKind("CronTab").
			WithName(ct.Name).
			WithUID(ct.UID).
			WithController(true).
			WithBlockOwnerDeletion(true)).
		WithSpec(spec)
}
