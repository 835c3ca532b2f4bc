// Package pulsarconsumer reconciles PulsarConsumer objects
// (pulsar.kubext.io/v1) into apps/v1 Deployments of the pulsar-consumer
// program: one Deployment per PulsarConsumer, of the same name, owned by it
// and kept matching it with server-side apply. The PulsarConsumer's status
// reports what the Deployment reports.
package pulsarconsumer

import (
	"context"
	"errors"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
	"github.com/kubext/kubext/internal/eventlog"
	"github.com/kubext/kubext/internal/ownedapply"
	"github.com/kubext/kubext/internal/statuspatch"
	"github.com/kubext/kubext/internal/version"
)

// DefaultRepository is where kubext's releases publish the image that
// holds every kubext binary, /pulsar-consumer included.
const DefaultRepository = "ghcr.io/kubext/manager"

// DefaultImage is the image the consumers run when neither the
// PulsarConsumer nor the manager names one: DefaultRepository tagged with
// this binary's own version, so that a manager runs consumers of its own
// release. An installer pins the manager's --pulsar-consumer-image to the
// digest it deploys, which is better still: a tag can move.
func DefaultImage() string {
	return DefaultRepository + ":" + imageTag(version.Get().Version)
}

// imageTag turns a version into a valid image tag ([A-Za-z0-9_.-], at most
// 128 characters, not starting with '.' or '-'): a Go pseudo-version's
// "+dirty" has a '+', which a tag cannot hold.
func imageTag(v string) string {
	b := []byte(v)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		default:
			b[i] = '-'
		}
	}
	t := strings.TrimLeft(string(b), ".-")
	if len(t) > 128 {
		t = t[:128]
	}
	if t == "" {
		return "latest"
	}
	return t
}

// Reconciler reconciles PulsarConsumer objects.
type Reconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Image is what the consumers run unless spec.image says otherwise;
	// DefaultImage when empty.
	Image string
}

// +kubebuilder:rbac:groups=pulsar.kubext.io,resources=pulsarconsumers,verbs=get;list;watch
// +kubebuilder:rbac:groups=pulsar.kubext.io,resources=pulsarconsumers/status,verbs=get;patch
// Owner references with blockOwnerDeletion need update on the owner's finalizers.
// +kubebuilder:rbac:groups=pulsar.kubext.io,resources=pulsarconsumers/finalizers,verbs=update
// Server-side apply is a patch, and a create when the Deployment does not exist.
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile makes one PulsarConsumer's Deployment match its spec and
// reports what the Deployment reports.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	pc := &pulsarv1.PulsarConsumer{}
	if err := r.Get(ctx, req.NamespacedName, pc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pc.DeletionTimestamp.IsZero() {
		// The Deployment goes with it through its owner reference.
		return ctrl.Result{}, nil
	}

	status := statuspatch.New(r.Client, pc, statusFields)
	defer func() { reterr = errors.Join(reterr, status.Patch(ctx, pc, reterr)) }()
	dep, err := r.reconcileDeployment(ctx, pc)
	if dep != nil {
		observe(pc, dep)
	}
	if failure := statuspatch.As(err); failure != nil {
		reportFailure(pc, failure, dep == nil)
	}
	if errors.Is(err, ownedapply.ErrNotControlled) {
		// Not ours to change. Its deletion is not an event for this
		// controller (it has no owner reference to us), so look again later.
		return ctrl.Result{RequeueAfter: nameTakenRetry}, nil
	}
	return ctrl.Result{}, err
}

// statusFields is where a PulsarConsumer keeps the status statuspatch
// writes.
func statusFields(pc *pulsarv1.PulsarConsumer) (any, *int64) {
	return pc.Status, &pc.Status.ObservedGeneration
}

// SetupWithManager registers the controller. It watches the Deployments it
// owns, so that a Deployment edited or deleted by hand is put back at once
// and the status follows the Deployment's.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Recorder = eventlog.Wrap(r.Recorder, mgr.GetLogger().WithValues("controller", "pulsarconsumer"))
	return ctrl.NewControllerManagedBy(mgr).
		Named("pulsarconsumer").
		For(&pulsarv1.PulsarConsumer{}).
		Owns(&appsv1.Deployment{}).
		Complete(r)
}

var _ reconcile.Reconciler = &Reconciler{}
