package ip

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// reconcileDelete detaches the address from its node, releases the
// reservation and only then lets the IP go.
func (r *Reconciler) reconcileDelete(ctx context.Context, ip *ipv1.IP) error {
	if !controllerutil.ContainsFinalizer(ip, ipv1.Finalizer) {
		return nil
	}
	orig := ip.DeepCopy()
	detached := r.detach(ip, "deleting")
	if err := r.patchStatus(ctx, orig, ip, false); err != nil || !detached {
		// The agent's confirmation (or its heartbeat running out) brings
		// us back.
		return err
	}
	if err := r.release(ctx, ip, ""); err != nil {
		return err
	}
	orig = ip.DeepCopy()
	controllerutil.RemoveFinalizer(ip, ipv1.Finalizer)
	if err := r.Patch(ctx, ip, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.Recorder.Eventf(ip, nil, corev1.EventTypeNormal, "Deleted", "Delete", "Detached and released %s", ip.Status.Address)
	return nil
}
