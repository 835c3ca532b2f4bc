package ipagent

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// CacheOptions is what the agent of node caches besides its IPs (see
// nodeIPs): the pods of its node (the holders it forwards to), its own
// Node (its labels, for Duty) and the IPPools (their nodeSelectors), all
// without managedFields, which the agent never reads.
func CacheOptions(node string) cache.Options {
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:  {Field: fields.OneTermEqualSelector("spec.nodeName", node)},
			&corev1.Node{}: {Field: fields.OneTermEqualSelector("metadata.name", node)},
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	}
}

// dutyRecheck is the backstop of Duty's event-driven view.
const dutyRecheck = 10 * time.Second

// Duty tells whether the node has anything to do with static IPs: some
// IPPool's nodeSelector selects it (it may be asked to hold one of the
// pool's addresses, and the controller asks only nodes whose agent renews
// its heartbeat), or an IP names it in status.node or status.attachedNode
// (it holds one, or must release one). The heartbeat renews only while
// Needed: a node that no pool selects writes nothing.
//
// Not renewing is, to everyone else, a heartbeat that failed: the agent's
// hold lapses and it fences, and the controller takes the node for no
// candidate once it has seen no renewal for a lease duration (a node whose
// Lease it never saw is none from the start). The one-answer argument of
// docs/design/static-ip-safety.md does not depend on why renewals stop.
//
// Needed never blocks: the heartbeat asks it on the loop that also fences.
// It is computed on Duty's own goroutine from the caches, at every change
// of the IPPools, the node or its IPs, and every dutyRecheck.
type Duty struct {
	node    string
	reader  client.Reader
	cache   cache.Cache
	ips     *nodeIPs
	needed  atomic.Bool
	checked atomic.Bool
	// leasePools: some pool with Lease failover selects the node.
	leasePools atomic.Bool
	wake       chan struct{}
	// changed is called when Needed turns true, so that the heartbeat
	// renews at once rather than at its next tick.
	changed func()
}

// NewDuty watches, through mgr's cache (set up with CacheOptions), what
// makes the node of r needed. r must be set up (SetupWithManager) first.
// onNeeded, if set, is called each time the node turns needed.
func (r *Reconciler) NewDuty(mgr ctrl.Manager, onNeeded func()) (*Duty, error) {
	if r.ips == nil {
		return nil, fmt.Errorf("ip-agent: NewDuty before SetupWithManager")
	}
	d := &Duty{node: r.Node, reader: mgr.GetCache(), cache: mgr.GetCache(), ips: r.ips,
		wake: make(chan struct{}, 1), changed: onNeeded}
	if d.changed == nil {
		d.changed = func() {}
	}
	return d, mgr.Add(d)
}

// Needed reports whether the node's agent must renew its heartbeat, as of
// the last check (false until the first one).
func (d *Duty) Needed() bool { return d.needed.Load() }

// OnlyWitnessPools reports whether every pool that selects the node has
// Witness failover, as of the last check (false until the first one): a
// node that may be asked to hold an IP on its Lease must keep it fresh.
func (d *Duty) OnlyWitnessPools() bool { return d.checked.Load() && !d.leasePools.Load() }

// NeedLeaderElection is false: every agent decides for its own node.
func (d *Duty) NeedLeaderElection() bool { return false }

// Start keeps Needed up to date until ctx ends.
func (d *Duty) Start(ctx context.Context) error {
	poke := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { d.poke() },
		UpdateFunc: func(any, any) { d.poke() },
		DeleteFunc: func(any) { d.poke() },
	}
	type source struct {
		c   cache.Cache
		obj client.Object
	}
	for _, s := range []source{{d.cache, &ipv1.IPPool{}}, {d.cache, &corev1.Node{}}, {d.ips.placed, &ipv1.IP{}}, {d.ips.attached, &ipv1.IP{}}} {
		inf, err := s.c.GetInformer(ctx, s.obj)
		if err != nil {
			return fmt.Errorf("watching %T for the node's duty: %w", s.obj, err)
		}
		if _, err := inf.AddEventHandler(poke); err != nil {
			return err
		}
	}
	log := ctrl.Log.WithName("duty").WithValues("node", d.node)
	tick := time.NewTicker(dutyRecheck)
	defer tick.Stop()
	for {
		needed, why, err := d.check(ctx)
		if err == nil {
			d.checked.Store(true)
		}
		switch {
		case err != nil:
			// Keep the last answer: a failed read says nothing new.
			log.Error(err, "Checking whether the node has static IPs to hold")
		case needed != d.needed.Load():
			d.needed.Store(needed)
			log.Info("Heartbeat "+map[bool]string{true: "needed", false: "not needed: no pool selects this node and no IP names it"}[needed], "why", why)
			if needed {
				d.changed()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-d.wake:
		case <-tick.C:
		}
	}
}

func (d *Duty) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// check computes Needed, and which object makes it so; and whether a pool
// with Lease failover selects the node (OnlyWitnessPools).
func (d *Duty) check(ctx context.Context) (bool, string, error) {
	empty, err := d.ips.empty(ctx)
	if err != nil {
		return false, "", err
	}
	pools := &ipv1.IPPoolList{}
	if err := d.reader.List(ctx, pools); err != nil {
		return false, "", err
	}
	node := &corev1.Node{}
	err = d.reader.Get(ctx, client.ObjectKey{Name: d.node}, node)
	if err != nil && !apierrors.IsNotFound(err) {
		return false, "", err
	}
	known := err == nil
	why, lease := "", false
	for i := range pools.Items {
		if selects(&pools.Items[i], node, known) {
			if why == "" {
				why = "pool " + pools.Items[i].Name + " selects this node"
			}
			lease = lease || pools.Items[i].Spec.Failover != ipv1.FailoverWitness
		}
	}
	d.leasePools.Store(lease)
	if !empty {
		return true, "an IP names this node", nil
	}
	return why != "", why, nil
}

// selects is the controller's rule (nodeAllowed in internal/controller/ip):
// a pool without a nodeSelector admits every node; one with a selector
// admits the nodes it matches (none if the node is not known, none if the
// selector is invalid).
func selects(pool *ipv1.IPPool, node *corev1.Node, known bool) bool {
	if pool.Spec.NodeSelector == nil {
		return true
	}
	if !known {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(pool.Spec.NodeSelector)
	return err == nil && sel.Matches(labels.Set(node.Labels))
}
