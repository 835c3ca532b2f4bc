package ip

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
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
	ix := mgr.GetFieldIndexer()
	if err := ix.IndexField(ctx, &corev1.Pod{}, indexClaim, func(o client.Object) []string {
		if name, ok := o.GetAnnotations()[ipv1.AnnotationIP]; ok {
			return []string{name}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := ix.IndexField(ctx, &corev1.Pod{}, indexClaimNode, func(o client.Object) []string {
		p := o.(*corev1.Pod)
		if _, ok := p.Annotations[ipv1.AnnotationIP]; ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := ix.IndexField(ctx, &ipv1.IP{}, indexNode, func(o client.Object) []string {
		ip := o.(*ipv1.IP)
		var nodes []string
		for _, n := range []string{ip.Status.Node, ip.Status.AttachedNode} {
			if n != "" {
				nodes = append(nodes, n)
			}
		}
		return nodes
	}); err != nil {
		return err
	}
	if err := ix.IndexField(ctx, &ipv1.IP{}, indexPool, func(o client.Object) []string {
		ip := o.(*ipv1.IP)
		if ip.Spec.Pool != "" {
			return []string{ip.Spec.Pool}
		}
		if ip.Status.Pool != "" {
			return []string{ip.Status.Pool}
		}
		return []string{noPool}
	}); err != nil {
		return err
	}
	if err := ix.IndexField(ctx, &ipv1.IP{}, indexWanted, func(o client.Object) []string {
		if a, err := ipam.Canonical(o.(*ipv1.IP).Spec.Address); err == nil {
			return []string{ipam.Name(a)}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := ix.IndexField(ctx, &corev1.Node{}, indexNodeAddress, func(o client.Object) []string {
		return nodeAddresses(o.(*corev1.Node))
	}); err != nil {
		return err
	}
	return ix.IndexField(ctx, &networkingv1.IPAddress{}, indexParent, func(o client.Object) []string {
		if name := parentIP(o.(*networkingv1.IPAddress)); name != "" {
			return []string{name}
		}
		return nil
	})
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

func (r *Reconciler) allIPs(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.ipsMatching(ctx)
}

// nodeToIPs maps a node whose agent turned healthy or unhealthy to the IPs
// placed on it and the IPs claimed by pods running there.
func (r *Reconciler) nodeToIPs(ctx context.Context, o client.Object) []reconcile.Request {
	node := heartbeat.NodeOf(o)
	if node == "" {
		return nil
	}
	reqs := r.ipsMatching(ctx, client.MatchingFields{indexNode: node})
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.MatchingFields{indexClaimNode: node}); err == nil {
		for i := range pods.Items {
			reqs = append(reqs, podToIP(ctx, &pods.Items[i])...)
		}
	}
	return reqs
}

func (r *Reconciler) ipsMatching(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	ips := &ipv1.IPList{}
	if err := r.List(ctx, ips, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing IPs to enqueue")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(ips.Items))
	for _, ip := range ips.Items {
		reqs = append(reqs, request(ip.Name))
	}
	return reqs
}
