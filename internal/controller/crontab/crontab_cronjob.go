package crontab

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	stablev1 "github.com/kubext/kubext/api/stable/v1"
	"github.com/kubext/kubext/internal/ownedapply"
	"github.com/kubext/kubext/internal/statuspatch"
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
// hand, a missing CronJob). It returns the CronJob as it now stands, or a
// *statuspatch.Error saying why it could not write it (wrapping
// ownedapply.ErrNotControlled when a CronJob of the name is not the
// CronTab's).
func (r *Reconciler) reconcileCronJob(ctx context.Context, ct *stablev1.CronTab) (*batchv1.CronJob, error) {
	cj, result, err := ownedapply.Apply(ctx, r.Client, FieldOwner, ct, ct.Status.ObservedGeneration,
		desiredCronJob(ct), batchv1ac.ExtractCronJob)
	var write *ownedapply.WriteError
	switch {
	case errors.Is(err, ownedapply.ErrNotControlled):
		return nil, statuspatch.Failed(stablev1.ReasonCronJobExists, err,
			"CronJob %s exists and is not controlled by this CronTab; delete or rename that CronJob, or rename the CronTab", ct.Name)
	case errors.As(err, &write) && write.Rejected:
		r.Recorder.Eventf(ct, nil, corev1.EventTypeWarning, stablev1.ReasonCronJobRejected, "Apply", "The API server refused the CronJob: %v", write.Err)
		return nil, statuspatch.Refused(stablev1.ReasonCronJobRejected, write.Err, "The API server refused the CronJob: %v", write.Err)
	case errors.As(err, &write):
		return nil, statuspatch.Failed(stablev1.ReasonApplyFailed, write.Err, "Writing CronJob %s failed, will retry: %v", ct.Name, write.Err)
	case err != nil:
		return nil, fmt.Errorf("applying CronJob %s/%s: %w", ct.Namespace, ct.Name, err)
	}
	cronJobReport.Record(r.Recorder, ct, cj, result, fmt.Sprintf(" running %s on %q", ct.Spec.Image, ct.Spec.CronSpec))
	return cj, nil
}

// cronJobReport words the Events of the CronJobs' writes.
var cronJobReport = ownedapply.Report{Kind: "CronJob", OwnerKind: "CronTab"}

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
