package ip

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/agenthealth"
	"github.com/kubext/kubext/internal/ipam"
)

// Cache indexes, so that lookups never scan every pod.
const (
	// indexClaim indexes pods by the IP they claim.
	indexClaim = "ip.kubext.io/claim"
	// indexClaimNode indexes claiming pods by their node.
	indexClaimNode = "ip.kubext.io/claim-node"
	// indexNode indexes IPs by status.node and status.attachedNode.
	indexNode = "ip.kubext.io/node"
	// indexPool indexes IPs by the pool they use.
	indexPool = "ip.kubext.io/pool"
	// indexParent indexes IPAddresses by the IP that reserved them.
	indexParent = "ip.kubext.io/parent"
	// indexWanted indexes IPs by the address their spec names, so that an
	// IP waiting for an address (AddressInUse) is retried when it is freed.
	indexWanted = "ip.kubext.io/wanted"
	// indexNodeAddress indexes nodes by their addresses.
	indexNodeAddress = "ip.kubext.io/node-address"

	// noPool is the indexPool value of IPs that name no pool and have not
	// found one (PoolNotFound): every pool change may be theirs.
	noPool = "\x00none"
)

func addIndexes(ctx context.Context, mgr ctrl.Manager) error {
	indexes := []struct {
		obj     client.Object
		field   string
		extract client.IndexerFunc
	}{
		{&corev1.Pod{}, indexClaim, func(o client.Object) []string {
			if name, ok := o.GetAnnotations()[ipv1.AnnotationIP]; ok {
				return []string{name}
			}
			return nil
		}},
		{&corev1.Pod{}, indexClaimNode, func(o client.Object) []string {
			p := o.(*corev1.Pod)
			if _, ok := p.Annotations[ipv1.AnnotationIP]; ok && p.Spec.NodeName != "" {
				return []string{p.Spec.NodeName}
			}
			return nil
		}},
		{&ipv1.IP{}, indexNode, func(o client.Object) []string {
			ip := o.(*ipv1.IP)
			var nodes []string
			for _, n := range []string{ip.Status.Node, ip.Status.AttachedNode} {
				if n != "" {
					nodes = append(nodes, n)
				}
			}
			return nodes
		}},
		{&ipv1.IP{}, indexPool, func(o client.Object) []string {
			ip := o.(*ipv1.IP)
			if ip.Spec.Pool != "" {
				return []string{ip.Spec.Pool}
			}
			if ip.Status.Pool != "" {
				return []string{ip.Status.Pool}
			}
			return []string{noPool}
		}},
		{&ipv1.IP{}, indexWanted, func(o client.Object) []string {
			if a, err := ipam.Canonical(o.(*ipv1.IP).Spec.Address); err == nil {
				return []string{ipam.Name(a)}
			}
			return nil
		}},
		{&corev1.Node{}, indexNodeAddress, func(o client.Object) []string {
			return nodeAddresses(o.(*corev1.Node))
		}},
		{&networkingv1.IPAddress{}, indexParent, func(o client.Object) []string {
			if name := parentIP(o.(*networkingv1.IPAddress)); name != "" {
				return []string{name}
			}
			return nil
		}},
	}
	ix := mgr.GetFieldIndexer()
	for _, i := range indexes {
		if err := ix.IndexField(ctx, i.obj, i.field, i.extract); err != nil {
			return fmt.Errorf("index %T by %s: %w", i.obj, i.field, err)
		}
	}
	return nil
}

// parentIP is the IP an IPAddress reserves an address for, if any.
func parentIP(a *networkingv1.IPAddress) string {
	if ref := a.Spec.ParentRef; ref != nil && ref.Group == ipv1.GroupVersion.Group && ref.Resource == "ips" {
		return ref.Name
	}
	return ""
}

func request(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Name: name}}
}

func podToIP(_ context.Context, o client.Object) []reconcile.Request {
	if name := o.GetAnnotations()[ipv1.AnnotationIP]; name != "" {
		return []reconcile.Request{request(name)}
	}
	return nil
}

// ipAddressToIPs maps a reservation to the IP that made it and to the IPs
// that want its address: when it goes, they may take it.
func (r *Reconciler) ipAddressToIPs(ctx context.Context, o client.Object) []reconcile.Request {
	reqs := r.ipsMatching(ctx, client.MatchingFields{indexWanted: o.GetName()})
	if name := parentIP(o.(*networkingv1.IPAddress)); name != "" {
		reqs = append(reqs, request(name))
	}
	return reqs
}

// poolToIPs maps a pool to its IPs and to the IPs that have not found a
// pool yet.
func (r *Reconciler) poolToIPs(ctx context.Context, o client.Object) []reconcile.Request {
	reqs := r.ipsMatching(ctx, client.MatchingFields{indexPool: o.GetName()})
	return append(reqs, r.ipsMatching(ctx, client.MatchingFields{indexPool: noPool})...)
}

// poolChanged passes pool creations, deletions and spec changes: the IP
// reconciler reads a pool's spec only (addresses, reserved, nodeSelector,
// claimants, provider), and the pool controller writes the pool's status
// at every allocation, which must not requeue every IP of the pool.
var poolChanged = predicate.GenerationChangedPredicate{}

// heartbeatToIPs maps a node whose agent turned healthy or unhealthy to
// the IPs placed on it and the IPs claimed by pods running there.
func (r *Reconciler) heartbeatToIPs(ctx context.Context, o client.Object) []reconcile.Request {
	reqs := requests(r.ipsOfNode(ctx, agenthealth.NodeOf(o)))
	// The node may be the witness some hold awaits.
	for _, name := range r.awaiting.list() {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
	}
	return reqs
}

// ipsOfNode are the IPs whose decision a node takes part in: those placed
// on it or attached to it, and those claimed by pods running there (its
// candidates and standbys). Other IPs never read anything of the node.
func (r *Reconciler) ipsOfNode(ctx context.Context, node string) []ipv1.IP {
	if node == "" {
		return nil
	}
	ips := r.listIPs(ctx, client.MatchingFields{indexNode: node})
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.MatchingFields{indexClaimNode: node}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the claiming pods of a node to enqueue their IPs")
		return ips
	}
	for i := range pods.Items {
		ip := &ipv1.IP{}
		name := pods.Items[i].Annotations[ipv1.AnnotationIP]
		if err := r.Get(ctx, types.NamespacedName{Name: name}, ip); err == nil {
			ips = append(ips, *ip)
		} else {
			// Not there (yet): the request reports it to the pod.
			ips = append(ips, ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	}
	return ips
}

// nodeEvents maps node events to IPs. A node's labels decide whether a
// pool's nodeSelector admits it, which matters only to the IPs the node
// takes part in (ipsOfNode), and of those only to the IPs whose pool
// selected the node before the change or selects it after, but not both.
// A node's creation or deletion matters to the IPs it takes part in. So a
// label change on one node requeues a handful of IPs, not all of them.
func (r *Reconciler) nodeEvents() handler.TypedEventHandler[client.Object, reconcile.Request] {
	enqueue := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], reqs []reconcile.Request) {
		for _, req := range reqs {
			q.Add(req)
		}
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, requests(r.ipsOfNode(ctx, e.Object.GetName())))
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, requests(r.ipsOfNode(ctx, e.Object.GetName())))
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, r.relabelled(ctx, e.ObjectOld, e.ObjectNew))
		},
	}
}

// relabelled are the IPs a node's label change concerns (see nodeEvents).
func (r *Reconciler) relabelled(ctx context.Context, old, cur client.Object) []reconcile.Request {
	if maps.Equal(old.GetLabels(), cur.GetLabels()) {
		return nil
	}
	ips := r.ipsOfNode(ctx, cur.GetName())
	if len(ips) == 0 {
		return nil
	}
	pools := &ipv1.IPPoolList{}
	if err := r.List(ctx, pools, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing pools for a node's label change: requeueing all of its IPs")
		return requests(ips)
	}
	flipped := map[string]bool{}
	for _, p := range pools.Items {
		flipped[p.Name] = selectsLabels(&p, old.GetLabels()) != selectsLabels(&p, cur.GetLabels())
	}
	var reqs []reconcile.Request
	for _, ip := range ips {
		pool := ip.Status.Pool
		if pool == "" {
			pool = ip.Spec.Pool
		}
		// An IP without a pool yet, or whose pool is gone, is requeued:
		// its pool is not known here.
		if f, known := flipped[pool]; f || !known {
			reqs = append(reqs, request(ip.Name))
		}
	}
	return reqs
}

// selectsLabels is whether the pool's nodeSelector admits a node with
// these labels, as nodeAllowed decides (no selector admits every node, an
// invalid one none).
func selectsLabels(p *ipv1.IPPool, set map[string]string) bool {
	if p.Spec.NodeSelector == nil {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.NodeSelector)
	return err == nil && sel.Matches(labels.Set(set))
}

func requests(ips []ipv1.IP) []reconcile.Request {
	seen := make(map[string]bool, len(ips))
	reqs := make([]reconcile.Request, 0, len(ips))
	for _, ip := range ips {
		if !seen[ip.Name] {
			seen[ip.Name] = true
			reqs = append(reqs, request(ip.Name))
		}
	}
	return reqs
}

func (r *Reconciler) listIPs(ctx context.Context, opts ...client.ListOption) []ipv1.IP {
	ips := &ipv1.IPList{}
	if err := r.List(ctx, ips, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing IPs to enqueue")
		return nil
	}
	return ips.Items
}

func (r *Reconciler) ipsMatching(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	return requests(r.listIPs(ctx, append(opts, client.UnsafeDisableDeepCopy)...))
}
