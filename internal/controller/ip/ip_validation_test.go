package ip

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// Addresses no node can answer for are refused by the API server, each
// with a message that says what is wrong (the CRDs' CEL rules, as served).
func TestAddressesANodeCannotAnswerForAreRefused(t *testing.T) {
	f := newFixture(t)
	for _, cidr := range []string{
		"::/0",           // hands out ::1
		"0.0.0.0/0",      // contains everything
		"127.0.0.0/8",    // loopback
		"127.0.0.1/32",   // loopback
		"169.254.0.0/24", // link-local
		"fe80::/64",      // link-local
		"224.0.0.0/24",   // multicast
		"ff02::/120",     // multicast
		"255.255.255.255/32",
		"0.0.0.0/32",
		"::/128",
		"::1/128",
	} {
		err := k8s.Create(f.Ctx, &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: f.name("bad")},
			Spec: ipv1.IPPoolSpec{Addresses: []string{cidr}}})
		f.G.Expect(err).To(MatchError(ContainSubstring("must hold only unicast addresses a node can answer for")), cidr)
	}
	for _, addr := range []string{"0.0.0.0", "::", "127.0.0.1", "::1", "169.254.1.1", "fe80::1", "224.0.0.1", "ff02::1", "255.255.255.255"} {
		err := k8s.Create(f.Ctx, &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: f.name("bad")},
			Spec: ipv1.IPSpec{Address: addr}})
		f.G.Expect(err).To(MatchError(ContainSubstring("spec.address must be a unicast address a node can answer for")), addr)
	}
	// What a user may write stays accepted.
	for _, cidr := range []string{"203.0.113.64/28", "2001:db8::/120", "10.0.0.0/8"} {
		p := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: f.name("ok")}, Spec: ipv1.IPPoolSpec{Addresses: []string{cidr}}}
		f.G.Expect(k8s.Create(f.Ctx, p, client.DryRunAll)).To(Succeed(), cidr)
	}
	// Claimants: a pool restriction needs something to restrict by, and
	// namespaces must be namespace names.
	err := k8s.Create(f.Ctx, &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: f.name("bad")},
		Spec: ipv1.IPPoolSpec{Addresses: []string{"203.0.113.80/28"}, Claimants: &ipv1.PoolClaimants{}}})
	f.G.Expect(err).To(MatchError(ContainSubstring("spec.claimants needs namespaces, namespaceSelector or podSelector")))
	err = k8s.Create(f.Ctx, &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: f.name("bad")},
		Spec: ipv1.IPSpec{Address: "203.0.113.81", Claimants: &ipv1.IPClaimants{Namespaces: []string{"Not_A_Namespace"}}}})
	f.G.Expect(err).To(MatchError(ContainSubstring("spec.claimants.namespaces[0]")))
}
