package ip

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/ipcond"
	"github.com/kubext/kubext/internal/statuspatch"
)

// reconcileDelete detaches the address from its node, releases the
// reservation and only then lets the IP go.
func (r *Reconciler) reconcileDelete(ctx context.Context, ip *ipv1.IP) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(ip, ipv1.Finalizer) {
		return ctrl.Result{}, nil
	}
	// A deletion is never done with the generation it read: the status
	// keeps the observedGeneration of the last spec reconciled.
	status := statuspatch.New(r.Client, ip, statusFields)
	patchStatus := func() error {
		ipcond.Summarize(ip)
		return status.PatchUnfinished(ctx, ip)
	}
	detached, err := r.detach(ctx, ip, "deleting")
	if err == nil && detached {
		// No node answers any more: take the address off EC2 too, and
		// release the Elastic IP if kubext allocated it, before the
		// reservation goes.
		if ec2err := r.releaseEC2(ctx, ip); ec2err != nil {
			return ctrl.Result{RequeueAfter: ec2Retry}, patchStatus()
		}
	}
	if err := errors.Join(err, patchStatus()); err != nil || !detached {
		// The agent's confirmation (or its heartbeat running out) brings
		// us back; this is the backstop.
		if err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: r.retryAfter(ip)}, nil
	}
	if err := r.release(ctx, ip, ""); err != nil {
		return ctrl.Result{}, err
	}
	if err := statuspatch.RemoveFinalizer(ctx, r.Client, ip, ipv1.Finalizer); err != nil {
		return ctrl.Result{}, err
	}
	r.Recorder.Eventf(ip, nil, corev1.EventTypeNormal, "Deleted", "Delete", "Detached and released %s", ip.Status.Address)
	return ctrl.Result{}, nil
}
