// Package crontab reconciles CronTab objects (stable.example.com/v1) into
// batch/v1 CronJobs: one CronJob per CronTab, of the same name, owned by it
// and kept matching it with server-side apply. The CronJob controller of
// kube-controller-manager then starts the Jobs; the CronTab's status reports
// what the CronJob reports.
package crontab

import (
	"context"
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	stablev1 "github.com/kubext/kubext/api/stable/v1"
	"github.com/kubext/kubext/internal/eventlog"
	"github.com/kubext/kubext/internal/ownedapply"
	"github.com/kubext/kubext/internal/statuspatch"
)

// Reconciler reconciles CronTab objects.
type Reconciler struct {
	client.Client
	Recorder events.EventRecorder
}

// +kubebuilder:rbac:groups=stable.example.com,resources=crontabs,verbs=get;list;watch
// +kubebuilder:rbac:groups=stable.example.com,resources=crontabs/status,verbs=get;patch
// Owner references with blockOwnerDeletion need update on the owner's finalizers.
// +kubebuilder:rbac:groups=stable.example.com,resources=crontabs/finalizers,verbs=update
// Server-side apply is a patch, and a create when the CronJob does not exist.
// +kubebuilder:rbac:groups=batch,resources=cronjobs,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile makes one CronTab's CronJob match its spec and reports what the
// CronJob reports.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	ct := &stablev1.CronTab{}
	if err := r.Get(ctx, req.NamespacedName, ct); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ct.DeletionTimestamp.IsZero() {
		// The CronJob goes with it through its owner reference.
		return ctrl.Result{}, nil
	}

	status := statuspatch.New(r.Client, ct, statusFields)
	defer func() { reterr = errors.Join(reterr, status.Patch(ctx, ct, reterr)) }()
	cj, err := r.reconcileCronJob(ctx, ct)
	if failure := statuspatch.As(err); failure != nil {
		setReady(ct, metav1.ConditionFalse, failure.Reason, "%s", failure.Message)
	}
	if errors.Is(err, ownedapply.ErrNotControlled) {
		// Not ours to change. Its deletion is not an event for this
		// controller (it has no owner reference to us), so look again later.
		return ctrl.Result{RequeueAfter: nameTakenRetry}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	observe(ct, cj)
	return ctrl.Result{}, nil
}

// statusFields is where a CronTab keeps the status statuspatch writes.
func statusFields(ct *stablev1.CronTab) (any, *int64) {
	return ct.Status, &ct.Status.ObservedGeneration
}

// observe copies what the CronJob reports into the status and sets Ready.
func observe(ct *stablev1.CronTab, cj *batchv1.CronJob) {
	ct.Status.Replicas = 0
	if p := cj.Spec.JobTemplate.Spec.Parallelism; p != nil {
		ct.Status.Replicas = *p
	}
	ct.Status.Active = int32(len(cj.Status.Active))
	ct.Status.LastScheduleTime = cj.Status.LastScheduleTime
	ct.Status.LastSuccessfulTime = cj.Status.LastSuccessfulTime
	if cj.Spec.Suspend != nil && *cj.Spec.Suspend {
		setReady(ct, metav1.ConditionTrue, stablev1.ReasonSuspended,
			"CronJob %s is suspended: no new runs start until spec.suspend is false", cj.Name)
		return
	}
	setReady(ct, metav1.ConditionTrue, stablev1.ReasonScheduled,
		"CronJob %s runs %q, %d pod(s) per run", cj.Name, cj.Spec.Schedule, ct.Status.Replicas)
}

func setReady(ct *stablev1.CronTab, status metav1.ConditionStatus, reason, format string, args ...any) {
	meta.SetStatusCondition(&ct.Status.Conditions, metav1.Condition{
		Type:               stablev1.ConditionReady,
		Status:             status,
		Reason:             reason,
		Message:            fmt.Sprintf(format, args...),
		ObservedGeneration: ct.Generation,
	})
}

// SetupWithManager registers the controller. It watches the CronJobs it
// owns, so that a CronJob edited or deleted by hand is put back at once and
// the status follows the CronJob's.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Recorder = eventlog.Wrap(r.Recorder, mgr.GetLogger().WithValues("controller", "crontab"))
	return ctrl.NewControllerManagedBy(mgr).
		Named("crontab").
		For(&stablev1.CronTab{}).
		Owns(&batchv1.CronJob{}).
		Complete(r)
}

var _ reconcile.Reconciler = &Reconciler{}
