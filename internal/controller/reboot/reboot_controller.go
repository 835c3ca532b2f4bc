// Package reboot is the reboot controller: it decides which nodes may reboot
// and walks each approved node through the protocol of
// api/reboot/v1alpha1/protocol.go — cordon, drain, order the reboot, verify
// the new boot ID, soak, uncordon — while the node agents only ask for
// reboots and carry them out on their own node.
//
// Decisions are made from informer caches of the nodes, the groups and the
// approvals ledger (ledger.go). The ledger, one ConfigMap updated with a
// resourceVersion precondition, guards the budget: a lagging cache can
// never make two approvals look affordable, because every slot kubext
// holds is in the ledger and every grant is a write conditional on the
// ledger as read. Every change to a
// node is a patch conditional on the resourceVersion that decision was made
// from, so a stale node is a conflict and a quick decision again. The
// whole cluster is one work item, handled by one worker of the one
// elected leader (and a second leader, or a paused ex-leader, is held by
// the same preconditions).
package reboot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/agenthealth"
	"github.com/kubext/kubext/internal/rebootplan"
)

// rollout is the single work item: any change anywhere may change what the
// whole cluster may do (budgets are per group, control-plane nodes are
// cluster-wide).
var rollout = reconcile.Request{}

const (
	// maxRequeue bounds the wait between two looks when no deadline is
	// nearer, so that pods matching a blockingPodSelector (not watched) are
	// noticed leaving.
	maxRequeue = 30 * time.Second
	// conflictRetry is how soon a decision is made again after a node
	// changed under it.
	conflictRetry = 50 * time.Millisecond
	// rereadRetry is how soon when every node that changed under a patch
	// was read again at once (writeNodes): the next look has what it needs.
	rereadRetry = time.Millisecond
)

// Reconciler is the reboot controller.
type Reconciler struct {
	// Client writes; its cache triggers reconciles.
	client.Client
	// Reader lists the nodes and groups decisions are made from: the
	// manager's cache (Client) when nil. See ledger.go for why that is
	// safe.
	Reader client.Reader
	// APIReader reads fresh what must not come from a cache: a node the
	// ledger's repair has to be sure of (ledger.go, step 4), the pods of
	// gates and blocking selectors.
	APIReader client.Reader
	// LedgerReader reads the approvals ledger: an informer cache of that
	// one ConfigMap (SetupWithManager makes it), or APIReader when nil.
	// Every ledger write is conditional on the version read, so a stale
	// ledger is a conflict, never a grant over a slot unseen (ledger.go).
	LedgerReader client.Reader
	// Kube evicts pods (k8s.io/kubectl/pkg/drain needs a clientset).
	Kube     kubernetes.Interface
	Recorder events.EventRecorder
	// Now is the controller's clock; tests replace it.
	Now func() time.Time
	// DrainBackoff is the first wait after a timed-out drain
	// (DefaultDrainBackoff when zero).
	DrainBackoff time.Duration
	// LedgerNamespace and LedgerName say where the approvals ledger
	// (ledger.go) is: a ConfigMap in the controller's own namespace;
	// DefaultLedgerName when the name is empty.
	LedgerNamespace, LedgerName string
	// Agents tracks the reboot-agents' heartbeat Leases
	// (agenthealth.NewTracker(rebootagent.HeartbeatComponent, ...)): a node
	// whose agent it has not seen renew lately is not approved, since
	// nothing would reboot it once drained. Nil: agents are not checked.
	Agents *agenthealth.Tracker

	drains *drainer
	// announced is the last wait reason an Event was emitted for, per node,
	// so that a node waiting for minutes produces one Event, not one per
	// reconcile.
	announced map[string]rebootplan.Reason
	// drainOutcome is the last drain result per group, for the
	// DrainBlocked condition.
	drainOutcome map[string]drainOutcome
	// back is when this controller first saw a rebooted node Ready with its
	// new boot ID, per node and approval: the start of its soak.
	back map[string]time.Time
	// sightings are when the node watch saw each rebooted node back.
	sightings sightings
	// freed is when a slot of each group became free and no node of the
	// group has been approved since, for decisionSeconds: the approval may
	// come in a later reconcile than the release (a conflict, a requeue),
	// and the time between counts.
	freed map[string]time.Time
	// statusWritten is when this controller last wrote each group's status
	// (progressBatch).
	statusWritten map[string]time.Time
	// quickRetried says the last reconcile asked for a look at once after
	// a refused patch (rereadRetry).
	quickRetried bool
	// beforeGrant, when set, runs between a decision and its grant: tests
	// pause a controller there, as a stalled leader would be.
	beforeGrant func()
	// own, ownGroups and ownLedger are the nodes, groups and ledger as
	// this controller last wrote them, until the cache shows them
	// (own.go).
	own       ownWrites[*corev1.Node]
	ownGroups ownWrites[*rebootv1.RebootGroup]
	ownLedger ownWrites[*corev1.ConfigMap]
}

// reader is where the nodes and groups are listed from.
func (r *Reconciler) reader() client.Reader {
	if r.Reader != nil {
		return r.Reader
	}
	return r.Client
}

// ledgerReader is where the ledger is read from.
func (r *Reconciler) ledgerReader() client.Reader {
	if r.LedgerReader != nil {
		return r.LedgerReader
	}
	return r.APIReader
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// Drain: list and evict the node's pods, look up their DaemonSets and PodDisruptionBudgets.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list
// +kubebuilder:rbac:groups=reboot.kubext.io,resources=rebootgroups,verbs=get;list;watch
// +kubebuilder:rbac:groups=reboot.kubext.io,resources=rebootgroups/status,verbs=get;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// Health gates: the namespaces a gate's namespaceSelector selects (pods and
// PodDisruptionBudgets are read as for drains).
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=list
// The reboot-agents' heartbeat Leases (with --reboot-require-agent-heartbeat),
// in the agents' namespace, the manager's (--heartbeat-namespace; the
// manager's cache holds no other Lease).
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=system,resources=leases,verbs=get;list;watch
// The approvals ledger, one ConfigMap in the controller's namespace (create
// cannot be limited to a name; get, update, and list and watch with a
// metadata.name field selector are).
// +kubebuilder:rbac:groups="",namespace=system,resources=configmaps,verbs=create
// +kubebuilder:rbac:groups="",namespace=system,resources=configmaps,resourceNames=kubext-reboot-ledger,verbs=get;list;watch;update

// Reconcile reads the nodes, the groups and the ledger from the caches,
// moves each node holding a slot one step along the protocol, approves
// what the budgets allow, and reports.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	now := r.Now()
	clock := startPhases()
	s, err := r.read(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	clock.done("read")
	next := newDeadlines(now)
	if s.absent, err = r.repairLedger(ctx, s, now, next); err != nil {
		return r.retry(ctx, err)
	}
	clock.done("repair")

	// First the nodes already in a reboot: finishing one frees its slot for
	// the approvals below, in the same pass (the release lands first, and
	// the give-back goes with the grant, in one ledger write).
	decision := rebootplan.Decide(s.snapshot(now))
	groups := s.groupsOf(decision)
	var steps []*nodeWrite
	for _, name := range s.names() {
		if w := r.advance(s, name, groups.of(name), now, next); w != nil {
			w.controlPlane = decision.IsControlPlane(name)
			steps = append(steps, w)
		}
	}
	// A node patch refused because the node changed since it was read
	// does not hold up the rest: the node still shows what it showed and
	// counts as it did (a release refused keeps its slot through its
	// annotations), the writes that landed are recorded, and the
	// reconcile looks again soon. Every other failure ends it.
	refused, reread := false, true
	soft := func(err error) error {
		var rp *refusedPatch
		if errors.As(err, &rp) {
			log.FromContext(ctx).V(1).Info("node changed meanwhile, looking again soon", "node", rp.node, "reread", rp.reread, "error", rp.err.Error())
			refused, reread = true, reread && rp.reread
			return nil
		}
		return err
	}
	if err := soft(r.writeNodes(ctx, s, steps)); err != nil {
		return r.retry(ctx, err)
	}
	holders := s.slotHolders()
	r.drains.forgetAllBut(holders)
	for key := range r.back {
		if node, _, _ := strings.Cut(key, "/"); !holders[node] {
			delete(r.back, key)
		}
	}
	r.sightings.forgetAllBut(holders)
	clock.done("advance")

	if s.held, err = r.checkGates(ctx, s, decision, next); err != nil {
		return r.retry(ctx, err)
	}
	clock.done("gates")
	if len(steps) > 0 || s.held != nil {
		// Decided again on what the steps wrote and the gates found;
		// otherwise nothing it decides from changed.
		decision = rebootplan.Decide(s.snapshot(now))
	}
	if len(decision.Approved) > 0 {
		if r.beforeGrant != nil {
			r.beforeGrant()
		}
		// The grant is the decision: it fails if the ledger changed since
		// it was read, whoever changed it.
		if err := r.grant(ctx, s, decision, now); err != nil {
			return r.retry(ctx, err)
		}
	}
	if s.ledger.owed {
		// Slots of completed reboots no grant took: given back on their
		// own. Should this fail, the ledger's repair gives them back at
		// the next look (ledger.go, step 4).
		if err := r.writeLedger(ctx, s.ledger, s.ledger.slots); err != nil {
			return r.retry(ctx, err)
		}
	}
	clock.done("grant")
	approvals := make([]*nodeWrite, 0, len(decision.Approved))
	groups = s.groupsOf(decision)
	for _, name := range decision.Approved {
		g := groups.of(name)
		w := r.approve(s, name, g, now)
		landed := w.landed
		w.landed = func() {
			landed()
			if t, ok := r.freed[g.name]; ok {
				decisionSeconds.Observe(r.Now().Sub(t).Seconds())
				delete(r.freed, g.name)
			}
		}
		approvals = append(approvals, w)
	}
	if err := soft(r.writeNodes(ctx, s, approvals)); err != nil {
		return r.retry(ctx, err)
	}
	clock.done("approve")
	// A freed slot no node can take now (none waits for the budget alone:
	// nothing asks, the group is paused, halted, held by a gate or outside its
	// window) is no decision pending.
	for name := range r.freed {
		if gd := decision.Group(name); gd == nil || len(gd.Waiting) == 0 || gd.Paused || gd.Halted || gd.Held != nil || !gd.InWindow {
			delete(r.freed, name)
		}
	}
	if err := soft(r.writeNodes(ctx, s, r.noteNeeded(s, now))); err != nil {
		return r.retry(ctx, err)
	}
	clock.done("note")
	r.announce(s, decision)
	if err := r.report(ctx, s, decision, now, next); err != nil {
		return r.retry(ctx, err)
	}
	clock.done("report")
	after := next.after(r.Now(), maxRequeue)
	quick := refused && reread && !r.quickRetried
	switch {
	case quick:
		after = min(after, rereadRetry)
	case refused:
		after = min(after, conflictRetry)
	}
	// Never two quick looks in a row: a node someone writes without pause
	// costs a look every conflictRetry at most.
	r.quickRetried = quick
	return ctrl.Result{RequeueAfter: after}, nil
}

// retry turns a conflict (a node or group changed since it was read) into a
// quick fresh look, and passes other errors on for backoff.
func (r *Reconciler) retry(ctx context.Context, err error) (ctrl.Result, error) {
	if isConflict(err) {
		log.FromContext(ctx).V(1).Info("changed meanwhile, deciding again", "error", err.Error())
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return ctrl.Result{}, err
}

// isConflict says whether err is the API server refusing a write made over
// an old version (a node, group or the ledger changed since it was read).
func isConflict(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status) && apierrors.IsConflict(err)
}

// SetupWithManager registers the controller. Node and group changes from
// the cache, and finished drains, all enqueue the one rollout item.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.LedgerNamespace == "" {
		return errors.New("the reboot controller needs the namespace of its approvals ledger")
	}
	if r.LedgerName == "" {
		r.LedgerName = DefaultLedgerName
	}
	finished := make(chan event.TypedGenericEvent[client.Object], 64)
	r.init(func() {
		select {
		case finished <- event.TypedGenericEvent[client.Object]{Object: &corev1.Node{}}:
		default: // a wake-up is already pending
		}
	})
	toRollout := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{rollout}
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("reboot").
		Watches(&corev1.Node{}, r.nodeEvents(toRollout), builder.WithPredicates(nodeChanged, r.notOwnWrite())).
		Watches(&rebootv1.RebootGroup{}, toRollout, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(finished, toRollout)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1})
	if r.LedgerReader == nil {
		ledgerCache, err := r.ledgerCache(mgr)
		if err != nil {
			return err
		}
		r.LedgerReader = ledgerCache
		// Someone else's write to the ledger (a second leader, a person
		// deleting it) is a reason to look again; the controller's own
		// are not. The controller starts once this cache has synced.
		notOwn := func(cm *corev1.ConfigMap) bool { return !r.ownLedger.isOwn(cm) }
		b = b.WatchesRawSource(source.Kind(ledgerCache, &corev1.ConfigMap{},
			handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, *corev1.ConfigMap) []reconcile.Request {
				return []reconcile.Request{rollout}
			}),
			predicate.TypedFuncs[*corev1.ConfigMap]{
				CreateFunc: func(e event.TypedCreateEvent[*corev1.ConfigMap]) bool { return notOwn(e.Object) },
				UpdateFunc: func(e event.TypedUpdateEvent[*corev1.ConfigMap]) bool { return notOwn(e.ObjectNew) },
			}))
	}
	if r.Agents != nil {
		// An agent turning alive or dead changes what may be approved.
		if err := r.Agents.Watch(context.Background(), mgr.GetCache()); err != nil {
			return err
		}
		if err := mgr.Add(r.Agents); err != nil {
			return err
		}
		b = b.WatchesRawSource(source.Channel(r.Agents.Changes(), toRollout))
	}
	return b.Complete(r)
}

// ledgerCache is an informer cache of the approvals ledger alone (a field
// selector on its name: the manager's Role lists and watches that one
// ConfigMap, nothing else of its namespace), started with the manager.
func (r *Reconciler) ledgerCache(mgr ctrl.Manager) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:            mgr.GetScheme(),
		Mapper:            mgr.GetRESTMapper(),
		DefaultNamespaces: map[string]cache.Config{r.LedgerNamespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Field: fields.OneTermEqualSelector("metadata.name", r.LedgerName)},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("the reboot ledger's cache: %w", err)
	}
	return c, mgr.Add(c)
}

// init makes the controller's memory; wake is called when a drain
// finishes.
func (r *Reconciler) init(wake func()) {
	r.drains = newDrainer(r.Kube, r.DrainBackoff, wake)
	r.announced = map[string]rebootplan.Reason{}
	r.drainOutcome = map[string]drainOutcome{}
	r.back = map[string]time.Time{}
	r.freed = map[string]time.Time{}
	r.statusWritten = map[string]time.Time{}
}

// nodeEvents enqueues the rollout for every node event, and notes when an
// update shows a rebooted node back (sightings).
func (r *Reconciler) nodeEvents(toRollout handler.EventHandler) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: toRollout.Create,
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if n, ok := e.ObjectNew.(*corev1.Node); ok {
				r.sightings.note(n, r.Now())
			}
			toRollout.Update(ctx, e, q)
		},
		DeleteFunc:  toRollout.Delete,
		GenericFunc: toRollout.Generic,
	}
}

// notOwnWrite drops the update events that carry a node as this controller
// itself wrote it: the reconcile that wrote it went on from what the API
// server returned, so the event brings nothing it has not decided on. (A
// reconcile that failed after the write is requeued by its error.)
func (r *Reconciler) notOwnWrite() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		n, ok := e.ObjectNew.(*corev1.Node)
		return !ok || !r.own.isOwn(n)
	}}
}

// nodeChanged passes node creations, deletions and the updates that can
// change a decision; status heartbeats and the like are dropped.
var nodeChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, okOld := e.ObjectOld.(*corev1.Node)
		n, okNew := e.ObjectNew.(*corev1.Node)
		if !okOld || !okNew {
			return true
		}
		a, b := rebootplan.NodeFrom(o), rebootplan.NodeFrom(n)
		return a.Ready != b.Ready || a.Unschedulable != b.Unschedulable || a.BootID != b.BootID ||
			a.ControlPlaneTaint != b.ControlPlaneTaint ||
			!mapsEqual(a.Labels, b.Labels) || !mapsEqual(a.Annotations, b.Annotations) ||
			readySince(o) != readySince(n)
	},
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
