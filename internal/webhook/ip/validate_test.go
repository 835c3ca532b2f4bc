package ip

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

func pool(name string, addresses ...string) ipv1.IPPool {
	return ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPPoolSpec{Addresses: addresses}}
}

func ip(address, poolName string) *ipv1.IP {
	return &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: ipv1.IPSpec{Address: address, Pool: poolName}}
}

func TestCheckPoolOverlap(t *testing.T) {
	existing := []ipv1.IPPool{
		pool("partners", "198.51.100.0/24"),
		pool("v6", "2001:db8::/120", "192.0.2.0/28"),
	}
	for _, tc := range []struct {
		name string
		pool ipv1.IPPool
		want string // empty: allowed
	}{
		{name: "disjoint", pool: pool("new", "203.0.113.0/24")},
		{name: "inside another", pool: pool("new", "198.51.100.96/28"),
			want: `spec.addresses: 198.51.100.96/28 overlaps IPPool "partners" (198.51.100.0/24); an address can belong to one pool only`},
		{name: "around another", pool: pool("new", "198.51.0.0/16"),
			want: `spec.addresses: 198.51.0.0/16 overlaps IPPool "partners" (198.51.100.0/24); an address can belong to one pool only`},
		{name: "several pools", pool: pool("new", "192.0.2.8/29", "2001:db8::/64", "198.51.100.7/32"),
			want: `spec.addresses: 192.0.2.8/29 overlaps IPPool "v6" (192.0.2.0/28), 2001:db8::/64 overlaps IPPool "v6" (2001:db8::/120), ` +
				`198.51.100.7/32 overlaps IPPool "partners" (198.51.100.0/24); an address can belong to one pool only`},
		{name: "itself on update", pool: pool("partners", "198.51.100.0/23")},
		{name: "not a CIDR is left to CEL", pool: pool("new", "198.51.100.1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := checkPoolOverlap(&tc.pool, existing)
			if tc.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(tc.want))
		})
	}
}

func TestCheckIPAddress(t *testing.T) {
	pools := []ipv1.IPPool{
		pool("partners", "198.51.100.96/28"),
		pool("lab", "192.0.2.0/24", "2001:db8::/120"),
		pool("broken", "not-a-cidr"),
	}
	for _, tc := range []struct {
		name string
		ip   *ipv1.IP
		want string // empty: allowed
	}{
		{name: "pool only", ip: ip("", "partners")},
		{name: "in its pool", ip: ip("198.51.100.100", "partners")},
		{name: "reserved-looking but assignable", ip: ip("198.51.100.97", "partners")},
		{name: "in a pool, no spec.pool", ip: ip("2001:db8::10", "")},
		{name: "outside its pool", ip: ip("203.0.113.200", "partners"),
			want: `spec.address: 203.0.113.200 is not in IPPool "partners" (198.51.100.96/28)`},
		{name: "in another pool than its own", ip: ip("192.0.2.10", "partners"),
			want: `spec.address: 192.0.2.10 is not in IPPool "partners" (198.51.100.96/28)`},
		{name: "network address", ip: ip("198.51.100.96", "partners"),
			want: `spec.address: 198.51.100.96 is the network address of 198.51.100.96/28 (IPPool "partners"), which no IP can hold; name another address`},
		{name: "broadcast address without spec.pool", ip: ip("192.0.2.255", ""),
			want: `spec.address: 192.0.2.255 is the broadcast address of 192.0.2.0/24 (IPPool "lab"), which no IP can hold; name another address`},
		{name: "in no pool", ip: ip("203.0.113.200", ""),
			want: `spec.address: 203.0.113.200 is in no IPPool; create one that contains it or name one in spec.pool`},
		{name: "pool not created yet", ip: ip("203.0.113.200", "later")},
		{name: "invalid pool is left to its condition", ip: ip("203.0.113.200", "broken")},
		{name: "not an address is left to CEL", ip: ip("203.0.113", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := checkIPAddress(tc.ip, pools)
			if tc.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(tc.want))
		})
	}
}
