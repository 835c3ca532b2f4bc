// Package ip reconciles IP objects: it reserves each IP's address in the
// API server, chooses which claiming pod holds it, and hands the address
// from node to node so that exactly one node answers for it at any time.
// The node agents (internal/ipagent) do the programming on the nodes.
//
// The hand-over protocol rests on two status fields. status.node is where
// the controller wants the address; status.attachedNode is where an agent
// has confirmed it answers for it, and only agents set it. The controller
// points status.node at a new node only once no other node is attached:
// it first asks the old node to let go (status.node empty) and waits for
// its agent to clear status.attachedNode, or, when the old node's agent has
// stopped renewing its heartbeat for a whole lease duration (by which time
// the agent has fenced itself), clears it on the agent's behalf. Every
// write is conditional on the resourceVersion it was computed from.
package ip

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/agenthealth"
	"github.com/kubext/kubext/internal/eventlog"
	"github.com/kubext/kubext/internal/ipcond"
	"github.com/kubext/kubext/internal/statuspatch"
)

// resync bounds how long an IP waits when an event was missed.
const resync = 5 * time.Minute

// Reconciler reconciles IP objects.
type Reconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Health says which nodes' agents are alive, from their Leases.
	Health *agenthealth.Tracker
	// DeleteStalePods deletes claiming pods on nodes whose agent is lost
	// when no standby can take over, so that their controller recreates
	// them elsewhere without waiting for the taint-based eviction (5 min).
	DeleteStalePods bool
	// AWS moves the addresses of pools with provider aws in EC2. Nil: such
	// pools' IPs are reported NotSupported and attached to no node.
	AWS AWSProvider
	// Workers is how many IPs are reconciled at once (default 1). Each
	// reconcile waits on a few API round trips; IPs are independent (the
	// API server arbitrates addresses), so at thousands of IPs the
	// workers, not the CPU, bound the rate.
	Workers int

	now func() time.Time
	// moveStarts and failoverStarts time attachments and failovers.
	moveStarts, failoverStarts *stopwatch

	mu sync.Mutex
	// refusals are the claim refusals already told to pods (see refuse).
	refusals map[string]struct{}

	aws awsState
	// decl are the witnesses' declarations (Witness failover).
	decl *declarations
	// awaiting are the IPs that await witnesses.
	awaiting awaiting
	// picking keeps the workers from racing each other for one address.
	picking picking
	// written keeps reconciles off a cache that has not seen the
	// controller's own last write.
	written ownWrites
}

// +kubebuilder:rbac:groups=ip.kubext.io,resources=ips,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=ip.kubext.io,resources=ips/status,verbs=get;patch
// +kubebuilder:rbac:groups=ip.kubext.io,resources=ips/finalizers,verbs=update
// +kubebuilder:rbac:groups=ip.kubext.io,resources=ippools,verbs=get;list;watch
// Addresses are reserved as IPAddress objects named by the address.
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ipaddresses,verbs=get;list;watch;create;delete;patch
// Pods claim IPs; delete is used only with --ip-delete-stale-pods.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// Agents' heartbeats, in the agents' namespace, the manager's
// (--heartbeat-namespace; the manager's cache holds no other Lease).
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=system,resources=leases,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one IP's reservation, holder and placement up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	if !r.Health.Synced() {
		// Right after a start nobody's heartbeat has been seen yet; deciding
		// now would take every node for dead.
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	ip := &ipv1.IP{}
	if err := r.Get(ctx, req.NamespacedName, ip); err != nil {
		if apierrors.IsNotFound(err) {
			r.awaiting.set(req.Name, false)
			r.written.forget(req.Name)
			return ctrl.Result{}, r.reportMissing(ctx, req.Name)
		}
		return ctrl.Result{}, fmt.Errorf("reading IP %s: %w", req.Name, err)
	}
	if r.written.stale(ip) {
		return ctrl.Result{RequeueAfter: recentWrite}, nil
	}
	if !ip.DeletionTimestamp.IsZero() {
		r.awaiting.set(ip.Name, false)
		return r.reconcileDelete(ctx, ip)
	}
	from := ip.ResourceVersion
	if added, err := statuspatch.AddFinalizer(ctx, r.Client, ip, ipv1.Finalizer); err != nil || added {
		if added {
			r.written.wrote(ip.Name, from, ip.ResourceVersion)
		}
		return ctrl.Result{}, err
	}

	status := statuspatch.New(r.Client, ip, statusFields)
	hadAddress, lastMove := ip.Status.Address, ip.Status.LastMoveTime
	defer func() {
		r.toldReservation(ip, hadAddress, lastMove)
		ipcond.Summarize(ip)
		err := status.Patch(ctx, ip, reterr)
		if err == nil {
			// The patch updated ip from the API server's answer.
			r.written.wrote(ip.Name, from, ip.ResourceVersion)
		}
		reterr = errors.Join(reterr, err)
	}()
	wasOn := ip.Status.Node
	if done, err := r.reconcileAddress(ctx, ip); err != nil || !done {
		// Waiting for an address (freed, pool created or grown) or for the
		// old one to be let go: the watches bring it back; this is the
		// backstop.
		if err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: r.retryAfter(ip)}, nil
	}
	res, err := r.reconcilePlacement(ctx, ip, status)
	if err != nil {
		return res, err
	}
	return res, r.leadInEC2(ctx, ip, status, wasOn)
}

// allocationRetry is the backstop for IPs waiting for an address.
const allocationRetry = 10 * time.Second

func (r *Reconciler) retryAfter(ip *ipv1.IP) time.Duration {
	if r.doubtful(ip) {
		return confirmEvery
	}
	return allocationRetry
}

// statusFields is where an IP keeps the status statuspatch writes.
func statusFields(ip *ipv1.IP) (any, *int64) {
	return ip.Status, &ip.Status.ObservedGeneration
}

// reportMissing tells the pods that claim an IP which does not exist.
func (r *Reconciler) reportMissing(ctx context.Context, name string) error {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.MatchingFields{indexClaim: name}); err != nil {
		return fmt.Errorf("listing the pods that claim IP %s: %w", name, err)
	}
	for i := range pods.Items {
		r.Recorder.Eventf(&pods.Items[i], nil, corev1.EventTypeWarning, "IPNotFound", "Claim",
			"IP %q does not exist; the claim waits until it is created", name)
	}
	return nil
}

// SetupWithManager registers the controller, its indexes and its watches.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.now == nil {
		r.now = time.Now
	}
	r.Recorder = eventlog.Wrap(r.Recorder, mgr.GetLogger().WithValues("controller", "ip"))
	r.moveStarts, r.failoverStarts = newStopwatch(), newStopwatch()
	r.refusals = map[string]struct{}{}
	r.picking.now = r.now
	r.aws.init()
	ipReady.use(mgr.GetCache())
	if err := addIndexes(ctx, mgr); err != nil {
		return fmt.Errorf("indexing the IP controller's cache: %w", err)
	}
	if err := r.Health.Watch(ctx, mgr.GetCache()); err != nil {
		return fmt.Errorf("watching the agents' heartbeats: %w", err)
	}
	if err := mgr.Add(r.Health); err != nil {
		return fmt.Errorf("running the agents' heartbeat tracker: %w", err)
	}
	r.decl = newDeclarations()
	if err := r.decl.watch(ctx, mgr.GetCache()); err != nil {
		return fmt.Errorf("watching the witnesses' declarations: %w", err)
	}
	claims := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetAnnotations()[ipv1.AnnotationIP]
		return ok
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("ip").
		For(&ipv1.IP{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToIP), builder.WithPredicates(claims)).
		Watches(&networkingv1.IPAddress{}, handler.EnqueueRequestsFromMapFunc(r.ipAddressToIPs)).
		Watches(&ipv1.IPPool{}, handler.EnqueueRequestsFromMapFunc(r.poolToIPs), builder.WithPredicates(poolChanged)).
		Watches(&corev1.Node{}, r.nodeEvents()).
		WatchesRawSource(source.Channel(r.Health.Changes(), handler.EnqueueRequestsFromMapFunc(r.heartbeatToIPs))).
		WatchesRawSource(source.Channel(r.decl.changes, handler.EnqueueRequestsFromMapFunc(r.heartbeatToIPs))).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)}).
		Complete(r)
}

var _ reconcile.Reconciler = &Reconciler{}
