package ipagent

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

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
// It is computed on Duty's own goroutine from the agent's informers, at
// every change of the IPPools, the node or its IPs.
type Duty struct {
	node    string
	pools   cache.Store
	nodes   cache.Store
	ips     *nodeIPs
	synced  func() bool
	watched []cache.SharedIndexInformer
	log     logr.Logger
	needed  atomic.Bool
	checked atomic.Bool
	// leasePools: some pool with Lease failover selects the node.
	leasePools atomic.Bool
	wake       chan struct{}
	// changed is called when Needed turns true, so that the heartbeat
	// renews at once rather than at its next tick.
	changed func()
}

// NewDuty watches, through the informers of r (Setup), what makes the
// node of r needed; Start runs it. onNeeded, if set, is called each time
// the node turns needed.
func (r *Reconciler) NewDuty(onNeeded func()) (*Duty, error) {
	if r.ips == nil {
		return nil, fmt.Errorf("ip-agent: NewDuty before Setup")
	}
	d := &Duty{node: r.Node, pools: r.pools.GetStore(), nodes: r.nodes.GetStore(), ips: r.ips,
		synced: r.synced.Load, watched: []cache.SharedIndexInformer{r.pools, r.nodes, r.ips.placed, r.ips.attached},
		log: r.Log.WithName("duty"), wake: make(chan struct{}, 1), changed: onNeeded}
	if d.changed == nil {
		d.changed = func() {}
	}
	poke := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { d.poke() },
		UpdateFunc: func(any, any) { d.poke() },
		DeleteFunc: func(any) { d.poke() },
	}
	for _, inf := range d.watched {
		if _, err := inf.AddEventHandler(poke); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Needed reports whether the node's agent must renew its heartbeat, as of
// the last check (false until the first one).
func (d *Duty) Needed() bool { return d.needed.Load() }

// OnlyWitnessPools reports whether every pool that selects the node has
// Witness failover, as of the last check (false until the first one): a
// node that may be asked to hold an IP on its Lease must keep it fresh.
func (d *Duty) OnlyWitnessPools() bool { return d.checked.Load() && !d.leasePools.Load() }

// Start keeps Needed up to date until ctx ends. It checks only once the
// agent's informers have synced (Needed is false until then): an
// informer that has not listed yet says nothing about what is absent.
func (d *Duty) Start(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), func() bool { return d.synced() }) {
		return nil // stopping
	}
	log := d.log
	for {
		needed, why := d.check()
		d.checked.Store(true)
		if needed != d.needed.Load() {
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
func (d *Duty) check() (bool, string) {
	empty := d.ips.empty()
	o, known, _ := d.nodes.GetByKey(d.node)
	node, _ := o.(*corev1.Node)
	known = known && node != nil
	why, lease := "", false
	for _, o := range d.pools.List() {
		pool, ok := o.(*ipv1.IPPool)
		if ok && selects(pool, node, known) {
			if why == "" {
				why = "pool " + pool.Name + " selects this node"
			}
			lease = lease || pool.Spec.Failover != ipv1.FailoverWitness
		}
	}
	d.leasePools.Store(lease)
	if !empty {
		return true, "an IP names this node"
	}
	return why != "", why
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
