// Package ippool reports each IPPool's capacity and use, flags pools that
// overlap, and keeps a pool with allocated addresses from being deleted
// until its IPs are gone.
package ippool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/eventlog"
	"github.com/kubext/kubext/internal/ipam"
	"github.com/kubext/kubext/internal/statuspatch"
)

// Finalizer keeps a pool while addresses are still reserved from it.
const Finalizer = "ip.kubext.io/pool-finalizer"

// Reconciler reconciles IPPools.
type Reconciler struct {
	client.Client
	Recorder events.EventRecorder
	// AWS says whether the manager runs the aws provider; without it, pools
	// with provider aws are not Ready (ProviderNotSupported).
	AWS bool
	// CountPeriod is how long a reservation or attachment waits before
	// the pool's counts are written (DefaultCountPeriod when zero): all that
	// happen meanwhile share one status write. Releases are counted at once.
	CountPeriod time.Duration
}

// DefaultCountPeriod batches the writes of a pool's counts. Ten thousand
// IPs claimed at once would otherwise write the pool's status once per
// reservation and per attachment, and every ip-agent of the cluster
// watches the pools (for their nodeSelectors): a thousand agents decoding
// each of those writes. The counts are at most this much behind; a release
// and a change to the pool itself are reconciled at once.
const DefaultCountPeriod = time.Second

// +kubebuilder:rbac:groups=ip.kubext.io,resources=ippools,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=ip.kubext.io,resources=ippools/status,verbs=get;patch
// +kubebuilder:rbac:groups=ip.kubext.io,resources=ippools/finalizers,verbs=update
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ipaddresses,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile updates one pool's status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	pool := &ipv1.IPPool{}
	if err := r.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	addresses, err := r.addresses(ctx, pool.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	allocated := len(addresses)
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, pool, allocated)
	}
	if added, err := statuspatch.AddFinalizer(ctx, r.Client, pool, Finalizer); err != nil || added {
		return ctrl.Result{}, err
	}

	status := statuspatch.New(r.Client, pool, statusFields)
	defer func() { reterr = errors.Join(reterr, status.Patch(ctx, pool, reterr)) }()
	ready := metav1.Condition{Type: ipv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipv1.ReasonReady}
	parsed, err := ipam.NewPool(pool.Spec.Addresses, pool.Spec.Reserved)
	if err == nil {
		err = validSelectors(pool)
	}
	if err != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ipv1.ReasonInvalidSpec, err.Error()
		setCondition(pool, ready)
		return ctrl.Result{}, nil
	}
	size := int64(min(parsed.Size(), math.MaxInt64))
	pool.Status.Size = size
	pool.Status.Allocated = int32(min(allocated, math.MaxInt32))
	// Available is what automatic allocation can still hand out: reserved
	// addresses (named explicitly by an IP) do not use any of it up.
	automatic := 0
	for _, a := range addresses {
		if addr, err := ipam.Canonical(a.Name); err == nil && parsed.Automatic(addr) {
			automatic++
		}
	}
	pool.Status.Available = max(size-int64(automatic), 0)
	poolAddresses.WithLabelValues(pool.Name, "size").Set(float64(size))
	poolAddresses.WithLabelValues(pool.Name, "allocated").Set(float64(allocated))

	ready.Message = fmt.Sprintf("%d of %d addresses allocated", allocated, size)
	if other, err := r.overlapping(ctx, pool, parsed); err != nil {
		return ctrl.Result{}, err
	} else if other != "" {
		ready.Status, ready.Reason = metav1.ConditionFalse, ipv1.ReasonPoolOverlap
		ready.Message = fmt.Sprintf("addresses overlap IPPool %s, which is older; an address belongs to whichever IP reserves it first", other)
	}
	if pool.Spec.Provider == ipv1.ProviderAWS && !r.AWS {
		ready.Status, ready.Reason = metav1.ConditionFalse, ipv1.ReasonProviderNotSupported
		ready.Message = "provider aws is not enabled in this manager (start it with --aws-provider): addresses are allocated but attached to no node (an l2 announcement would not reach them in a VPC)"
	}
	setCondition(pool, ready)
	return ctrl.Result{}, r.witnessCondition(ctx, pool)
}

// validSelectors checks what CEL cannot: that the label selectors parse.
// An invalid selector would otherwise read as "no node matches".
func validSelectors(pool *ipv1.IPPool) error {
	check := func(sel *metav1.LabelSelector, field string) error {
		if sel == nil {
			return nil
		}
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			return fmt.Errorf("%s is invalid: %v", field, err)
		}
		return nil
	}
	errs := []error{check(pool.Spec.NodeSelector, "spec.nodeSelector")}
	if c := pool.Spec.Claimants; c != nil {
		errs = append(errs, check(c.NamespaceSelector, "spec.claimants.namespaceSelector"), check(c.PodSelector, "spec.claimants.podSelector"))
	}
	return errors.Join(errs...)
}

// reconcileDelete lets a pool go only when no address is reserved from it.
func (r *Reconciler) reconcileDelete(ctx context.Context, pool *ipv1.IPPool, allocated int) error {
	if !controllerutil.ContainsFinalizer(pool, Finalizer) {
		return nil
	}
	if allocated > 0 {
		r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, ipv1.ReasonDeleteBlocked, "Delete",
			"%d addresses are still allocated from this pool; delete their IPs first", allocated)
		return nil
	}
	poolAddresses.DeleteLabelValues(pool.Name, "size")
	poolAddresses.DeleteLabelValues(pool.Name, "allocated")
	return statuspatch.RemoveFinalizer(ctx, r.Client, pool, Finalizer)
}

// addresses lists the reservations made from the pool: the cache's own
// objects, which nothing may modify.
func (r *Reconciler) addresses(ctx context.Context, pool string) ([]networkingv1.IPAddress, error) {
	list := &networkingv1.IPAddressList{}
	// Read only, and by the ten thousand in a large pool: the cache's own
	// objects, not a copy of each at every reconcile.
	if err := r.List(ctx, list, client.MatchingLabels{ipv1.LabelPool: pool}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the addresses reserved from IPPool %s: %w", pool, err)
	}
	return list.Items, nil
}

// overlapping names an older pool whose addresses overlap this one's.
func (r *Reconciler) overlapping(ctx context.Context, pool *ipv1.IPPool, parsed *ipam.Pool) (string, error) {
	pools := &ipv1.IPPoolList{}
	if err := r.List(ctx, pools); err != nil {
		return "", fmt.Errorf("listing IPPools to find those IPPool %s overlaps: %w", pool.Name, err)
	}
	slices.SortFunc(pools.Items, older)
	for i := range pools.Items {
		other := &pools.Items[i]
		if other.Name == pool.Name {
			return "", nil // only older pools count
		}
		if p, err := ipam.NewPool(other.Spec.Addresses, other.Spec.Reserved); err == nil && p.Overlaps(parsed) {
			return other.Name, nil
		}
	}
	return "", nil
}

func older(a, b ipv1.IPPool) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// statusFields is where an IPPool keeps the status statuspatch writes.
func statusFields(pool *ipv1.IPPool) (any, *int64) {
	return pool.Status, &pool.Status.ObservedGeneration
}

func setCondition(pool *ipv1.IPPool, c metav1.Condition) {
	c.ObservedGeneration = pool.Generation
	meta.SetStatusCondition(&pool.Status.Conditions, c)
}

// SetupWithManager registers the controller: a pool is reconciled when it
// changes, when its addresses are reserved or released, and when another
// pool changes (overlaps).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Recorder = eventlog.Wrap(r.Recorder, mgr.GetLogger().WithValues("controller", "ippool"))
	if r.CountPeriod == 0 {
		r.CountPeriod = DefaultCountPeriod
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("ippool").
		For(&ipv1.IPPool{}, builder.WithPredicates(notStatusOnly)).
		Watches(&networkingv1.IPAddress{}, after(r.CountPeriod, addressToPool)).
		Watches(&ipv1.IPPool{}, handler.EnqueueRequestsFromMapFunc(r.allPools), builder.WithPredicates(notStatusOnly)).
		Watches(&ipv1.IP{}, after(r.CountPeriod, ipToPool), builder.WithPredicates(fallbackChanged)).
		Complete(r)
}

// notStatusOnly drops the pool updates that change nothing but its status:
// the status is this controller's own write, and a reconcile at each of
// them would write the counts again at once, undoing CountPeriod.
var notStatusOnly = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	return o.GetGeneration() != n.GetGeneration() || !o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
		!slices.Equal(o.GetFinalizers(), n.GetFinalizers()) || !maps.Equal(o.GetLabels(), n.GetLabels()) ||
		!maps.Equal(o.GetAnnotations(), n.GetAnnotations())
}}

// after enqueues the pools mapFn names once period has passed: the
// reservations and attachments of that period are one reconcile (the queue
// keeps one entry per pool, due at the earliest time asked). A release is
// counted at once: a pool is deleted only once its count is zero (the
// ippool-in-use admission policy), and whoever deletes a pool's last IPs
// deletes the pool next.
func after(period time.Duration, mapFn handler.MapFunc) handler.EventHandler {
	add := func(ctx context.Context, o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request], wait time.Duration) {
		for _, req := range mapFn(ctx, o) {
			q.AddAfter(req, wait)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q, period)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.ObjectOld, q, period)
			add(ctx, e.ObjectNew, q, period)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q, 0)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q, period)
		},
	}
}

func addressToPool(_ context.Context, o client.Object) []reconcile.Request {
	if pool := o.GetLabels()[ipv1.LabelPool]; pool != "" {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: pool}}}
	}
	return nil
}

func (r *Reconciler) allPools(ctx context.Context, _ client.Object) []reconcile.Request {
	pools := &ipv1.IPPoolList{}
	if err := r.List(ctx, pools); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(pools.Items))
	for _, p := range pools.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Name: p.Name}})
	}
	return reqs
}
