package ipam

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// ClaimPolicy decides which pods may claim an IP: the IP's spec.claimants
// and its pool's. Either may be nil.
//
// The rule, secure by default: at least one namespace restriction must
// exist (the IP's namespaces, or the pool's namespaces or
// namespaceSelector), the pod's namespace must pass every one that exists,
// and its labels every podSelector that is set. A pool's namespaces and
// namespaceSelector are one restriction (either may admit the namespace).
// With no namespace restriction at all, no pod may claim the IP: an address
// on a partner's allow-list is never up for grabs by whoever annotates a
// pod first.
type ClaimPolicy struct {
	IP   *ipv1.IPClaimants
	Pool *ipv1.PoolClaimants
}

// ClaimRequest is what the policy needs to know of a claiming pod.
type ClaimRequest struct {
	Namespace string
	// NamespaceLabels are the labels of the pod's namespace (only read
	// when the pool has a namespaceSelector).
	NamespaceLabels map[string]string
	PodLabels       map[string]string
}

// NeedsNamespaceLabels reports whether Allows reads NamespaceLabels.
func (p ClaimPolicy) NeedsNamespaceLabels() bool {
	return p.Pool != nil && p.Pool.NamespaceSelector != nil
}

// Allows returns "" when the pod may claim the IP, or why not, in words for
// an Event and a condition.
func (p ClaimPolicy) Allows(r ClaimRequest) string {
	restricted := false
	if p.IP != nil && len(p.IP.Namespaces) > 0 {
		restricted = true
		if !slices.Contains(p.IP.Namespaces, r.Namespace) {
			return fmt.Sprintf("namespace %s is not in the IP's spec.claimants.namespaces (%s)",
				r.Namespace, strings.Join(p.IP.Namespaces, ", "))
		}
	}
	if p.Pool != nil && (len(p.Pool.Namespaces) > 0 || p.Pool.NamespaceSelector != nil) {
		restricted = true
		ok, err := p.poolAdmitsNamespace(r)
		if err != nil {
			return err.Error()
		}
		if !ok {
			return fmt.Sprintf("namespace %s is not allowed by the pool's spec.claimants (%s)", r.Namespace, p.describePoolNamespaces())
		}
	}
	if !restricted {
		return "neither the IP nor its pool names the namespaces allowed to claim it (spec.claimants.namespaces)"
	}
	if p.IP != nil {
		if why := matches(p.IP.PodSelector, r.PodLabels, "the IP's spec.claimants.podSelector"); why != "" {
			return why
		}
	}
	if p.Pool != nil {
		if why := matches(p.Pool.PodSelector, r.PodLabels, "the pool's spec.claimants.podSelector"); why != "" {
			return why
		}
	}
	return ""
}

func (p ClaimPolicy) poolAdmitsNamespace(r ClaimRequest) (bool, error) {
	if slices.Contains(p.Pool.Namespaces, r.Namespace) {
		return true, nil
	}
	if p.Pool.NamespaceSelector == nil {
		return false, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Pool.NamespaceSelector)
	if err != nil {
		return false, fmt.Errorf("the pool's spec.claimants.namespaceSelector is invalid (%v): no pod may claim", err)
	}
	return sel.Matches(labels.Set(r.NamespaceLabels)), nil
}

func (p ClaimPolicy) describePoolNamespaces() string {
	var parts []string
	if len(p.Pool.Namespaces) > 0 {
		parts = append(parts, "namespaces "+strings.Join(p.Pool.Namespaces, ", "))
	}
	if p.Pool.NamespaceSelector != nil {
		parts = append(parts, "namespaceSelector "+metav1.FormatLabelSelector(p.Pool.NamespaceSelector))
	}
	return strings.Join(parts, "; ")
}

// matches returns "" when sel is unset or matches, else why not. An invalid
// selector admits nobody.
func matches(sel *metav1.LabelSelector, podLabels map[string]string, what string) string {
	if sel == nil {
		return ""
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return fmt.Sprintf("%s is invalid (%v): no pod may claim", what, err)
	}
	if !s.Matches(labels.Set(podLabels)) {
		return fmt.Sprintf("the pod's labels do not match %s (%s)", what, metav1.FormatLabelSelector(sel))
	}
	return ""
}

// Unfit says why a pod allowed to claim an IP still cannot hold its
// address, or "": it runs in the host network, or has addresses but none of
// the family of address (the IP's status.address; unknown when empty).
func Unfit(address string, p *corev1.Pod) string {
	if p.Spec.HostNetwork {
		return "it runs in the host network: its traffic is the node's own, and sending it from the static IP would take over the whole node"
	}
	addr, err := netip.ParseAddr(address)
	if err != nil || len(p.Status.PodIPs) == 0 {
		return "" // not Ready yet anyway
	}
	for _, pip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(pip.IP); err == nil && a.Is4() == addr.Is4() {
			return ""
		}
	}
	family := "IPv4"
	if addr.Is6() {
		family = "IPv6"
	}
	return fmt.Sprintf("it has no %s address, and %s is %s", family, addr, family)
}
