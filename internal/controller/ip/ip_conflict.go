package ip

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs,verbs=get;list;watch
// Namespace labels, for pools whose spec.claimants has a namespaceSelector.
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// poolOf is the IP's pool (status.pool, found when the address was
// allocated), or nil when it is gone.
func (r *Reconciler) poolOf(ctx context.Context, ip *ipv1.IP) (*ipv1.IPPool, error) {
	pool := &ipv1.IPPool{}
	if err := r.Get(ctx, types.NamespacedName{Name: ip.Status.Pool}, pool); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, nil
		}
		return nil, fmt.Errorf("reading pool %s of IP %s: %w", ip.Status.Pool, ip.Name, err)
	}
	return pool, nil
}

// unattachable returns a reason and message when no node may answer for
// the IP's address at all: its pool's provider cannot attach it, or the
// address belongs to something else in the cluster (attaching it would
// steal a node's traffic, shadow pods or Services). "" when it may be
// attached.
func (r *Reconciler) unattachable(ctx context.Context, ip *ipv1.IP, pool *ipv1.IPPool) (string, string) {
	if pool != nil && pool.Spec.Provider == ipv1.ProviderAWS && r.AWS == nil {
		return ipv1.ReasonNotSupported, fmt.Sprintf(
			"pool %s uses provider aws, but this manager runs without it (no EC2 access configured); %s stays reserved and is attached to no node",
			pool.Name, ip.Status.Address)
	}
	addr, err := netip.ParseAddr(ip.Status.Address)
	if err != nil {
		return "", ""
	}
	if why := r.addressConflict(ctx, addr); why != "" {
		return ipv1.ReasonAddressConflict, fmt.Sprintf("%s is %s; it is attached to no node", addr, why)
	}
	return "", ""
}

// addressConflict says what in the cluster already uses addr, or "". A
// failed read is no conflict: the next reconcile checks again, and the
// agents refuse an address the node itself already has.
func (r *Reconciler) addressConflict(ctx context.Context, addr netip.Addr) string {
	nodes := &corev1.NodeList{}
	if err := r.List(ctx, nodes, client.MatchingFields{indexNodeAddress: addr.String()}, client.UnsafeDisableDeepCopy); err == nil && len(nodes.Items) > 0 {
		return "an address of node " + nodes.Items[0].Name
	}
	nodes = &corev1.NodeList{}
	if err := r.List(ctx, nodes, client.UnsafeDisableDeepCopy); err == nil {
		for _, n := range nodes.Items {
			cidrs := n.Spec.PodCIDRs
			if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
				cidrs = []string{n.Spec.PodCIDR}
			}
			if c := containing(cidrs, addr); c != "" {
				return fmt.Sprintf("in the pod range %s of node %s", c, n.Name)
			}
		}
	}
	services := &networkingv1.ServiceCIDRList{}
	if err := r.List(ctx, services, client.UnsafeDisableDeepCopy); err == nil {
		for _, s := range services.Items {
			if c := containing(s.Spec.CIDRs, addr); c != "" {
				return fmt.Sprintf("in the Service range %s (ServiceCIDR %s)", c, s.Name)
			}
		}
	}
	return ""
}

// containing is the first of cidrs that contains addr, or "".
func containing(cidrs []string, addr netip.Addr) string {
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil && p.Contains(addr) {
			return c
		}
	}
	return ""
}

// nodeAddresses are the canonical addresses a node reports.
func nodeAddresses(n *corev1.Node) []string {
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if addr, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, addr.Unmap().String())
		}
	}
	return out
}
