// Package redis reconciles Redis objects (cache.kubext.io/v1alpha1): a
// StatefulSet of size members, a headless Service for their stable DNS
// names, a Service for the primary and one for the replicas, and a
// PodDisruptionBudget, all owned by the Redis and kept matching it with
// server-side apply; the Secret of its generated password, unless it
// names its own or asks for none (redis_password.go); and, inside Redis,
// one primary with every other member replicating from it
// (internal/redisrepl decides and acts). The status reports what is
// observed: the primary, the members in service, and why any is not.
package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	"github.com/kubext/kubext/internal/ownedapply"
	"github.com/kubext/kubext/internal/redisrepl"
	"github.com/kubext/kubext/internal/statuspatch"
)

// Reconciler reconciles Redis objects.
type Reconciler struct {
	client.Client
	// APIReader reads the password Secret straight from the API server:
	// kubext gets the one Secret it is told of and needs no right to list or
	// watch the cluster's Secrets.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Connect returns the client that talks to the members of a Redis
	// protected by password (empty for none): redisrepl.Redis.
	Connect func(password string) redisrepl.Client

	// paces remembers, by Redis, which members did not answer their last
	// observation (a redisrepl.Pace). It is lost when the manager
	// restarts, which costs one round with the usual dial timeouts.
	paces sync.Map
}

// +kubebuilder:rbac:groups=cache.kubext.io,resources=redis,verbs=get;list;watch
// +kubebuilder:rbac:groups=cache.kubext.io,resources=redis/status,verbs=get;patch
// Owner references with blockOwnerDeletion need update on the owner's finalizers.
// +kubebuilder:rbac:groups=cache.kubext.io,resources=redis/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile makes one Redis's objects match its spec, keeps its members
// replicating from one primary and reports what it observes.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	rd := &cachev1.Redis{}
	if err := r.Get(ctx, req.NamespacedName, rd); err != nil {
		if apierrors.IsNotFound(err) {
			r.paces.Delete(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !rd.DeletionTimestamp.IsZero() {
		// Its objects go with it through their owner references.
		r.paces.Delete(req.NamespacedName)
		return ctrl.Result{}, nil
	}

	status := statuspatch.New(r.Client, rd, statusFields)
	defer func() { reterr = errors.Join(reterr, status.Patch(ctx, rd, reterr)) }()
	var err error
	// A generated password's Secret is made before the StatefulSet, so that
	// the members find it when they start; a Secret the spec names is the
	// user's to make, and the objects are made without waiting for it.
	var password string
	if generates(rd) {
		if password, err = r.password(ctx, rd); err != nil {
			return passwordMissing(rd, err)
		}
	}
	sts, err := r.reconcileObjects(ctx, rd)
	if errors.Is(err, ownedapply.ErrNotControlled) {
		// Not ours to change, and its deletion is no event for this
		// controller: look again later.
		return ctrl.Result{RequeueAfter: nameTakenRetry}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	rd.Status.Replicas = sts.Status.Replicas

	if !generates(rd) {
		if password, err = r.password(ctx, rd); err != nil {
			return passwordMissing(rd, err)
		}
	}
	poll, err := r.reconcileReplication(ctx, rd, password)
	if err != nil {
		return ctrl.Result{}, err
	}
	if poll > 0 {
		return ctrl.Result{RequeueAfter: poll}, nil
	}
	if rd.Status.Primary != "" || meta.IsStatusConditionTrue(rd.Status.Conditions, cachev1.ConditionReady) {
		// Nothing in the API tells of a change inside Redis (a primary's
		// process gone and restarted in the same pod, a replica's link
		// going down, a REPLICAOF typed by hand): look again soon, so that
		// a lost primary is replaced within seconds.
		return ctrl.Result{RequeueAfter: observeEvery}, nil
	}
	return ctrl.Result{RequeueAfter: retryAfter(rd)}, nil
}

// passwordMissing is the result of a reconcile that has no password to
// talk to the members with (err from password).
func passwordMissing(rd *cachev1.Redis, err error) (ctrl.Result, error) {
	switch {
	case errors.Is(err, errNoSecret):
		// Secrets are not watched (see APIReader): look again.
		return ctrl.Result{RequeueAfter: retryAfter(rd)}, nil
	case errors.Is(err, ownedapply.ErrNotControlled):
		return ctrl.Result{RequeueAfter: nameTakenRetry}, nil
	}
	return ctrl.Result{}, err
}

const (
	// observeEvery is how often the members of a Redis that has a primary
	// are observed again: one INFO per member.
	observeEvery = time.Second
	// handoverPoll is how often the members are observed during a
	// planned handover (FAILOVER), whose end moves the primary label:
	// the clients' writes are held or refused meanwhile.
	handoverPoll = 50 * time.Millisecond
	// urgentPoll is how soon the members are observed again while the
	// primary does not answer (redisrepl.Pace.Urgent): the round that
	// finds its replicas' links down promotes one. A round then takes
	// about redisrepl.UnansweredDialTimeout.
	urgentPoll = 50 * time.Millisecond
	// resync bounds the back-off of a Redis that has no primary.
	resync = 30 * time.Second
	// nameTakenRetry is how often a Redis whose object names are taken by
	// objects it does not control looks again.
	nameTakenRetry = time.Minute
)

// retryAfter backs off while a Redis is not Ready: half the time it has
// been so, from one second up to resync, so that a member starting is seen
// at once and one that stays unreachable costs a dial every 30 seconds.
func retryAfter(rd *cachev1.Redis) time.Duration {
	since := time.Duration(0)
	if c := meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady); c != nil {
		since = time.Since(c.LastTransitionTime.Time)
	}
	return min(max(since/2, time.Second), resync)
}

// statusFields is where a Redis keeps the status statuspatch writes.
func statusFields(rd *cachev1.Redis) (any, *int64) {
	return rd.Status, &rd.Status.ObservedGeneration
}

func setCondition(rd *cachev1.Redis, typ string, status metav1.ConditionStatus, reason, format string, args ...any) {
	meta.SetStatusCondition(&rd.Status.Conditions, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            fmt.Sprintf(format, args...),
		ObservedGeneration: rd.Generation,
	})
}

// SetupWithManager registers the controller. It watches what it owns, so
// that an object edited or deleted by hand is put back at once, and the
// member pods (owned by the StatefulSet), so that a pod gone, started or
// given an address is acted on at once.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("redis").
		For(&cachev1.Redis{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToRedis)).
		// A cordon (a drain's first step) makes a primary there hand over
		// before its eviction.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.nodeToRedis),
			builder.WithPredicates(predicate.Funcs{
				CreateFunc:  func(event.CreateEvent) bool { return false },
				DeleteFunc:  func(event.DeleteEvent) bool { return false },
				GenericFunc: func(event.GenericEvent) bool { return false },
				UpdateFunc: func(e event.UpdateEvent) bool {
					before, ok1 := e.ObjectOld.(*corev1.Node)
					after, ok2 := e.ObjectNew.(*corev1.Node)
					return ok1 && ok2 && before.Spec.Unschedulable != after.Spec.Unschedulable
				},
			})).
		// Each reconcile may wait up to a dial timeout on members that do
		// not answer; several at once keep one slow Redis from delaying
		// the others.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
}

// podToRedis maps a member pod to its Redis.
func podToRedis(_ context.Context, o client.Object) []reconcile.Request {
	name, ok := o.GetLabels()[cachev1.LabelRedis]
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}

// nodeToRedis maps a node to the Redises with a member pod on it.
func (r *Reconciler) nodeToRedis(ctx context.Context, o client.Object) []reconcile.Request {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.HasLabels{cachev1.LabelRedis}); err != nil {
		return nil
	}
	seen := map[client.ObjectKey]bool{}
	var out []reconcile.Request
	for i := range pods.Items {
		p := &pods.Items[i]
		key := client.ObjectKey{Namespace: p.Namespace, Name: p.Labels[cachev1.LabelRedis]}
		if p.Spec.NodeName == o.GetName() && !seen[key] {
			seen[key] = true
			out = append(out, reconcile.Request{NamespacedName: key})
		}
	}
	return out
}

var _ reconcile.Reconciler = &Reconciler{}
