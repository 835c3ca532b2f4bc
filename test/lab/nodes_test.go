package lab

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
)

func TestPodCIDRs(t *testing.T) {
	g := NewWithT(t)
	sub := netip.MustParsePrefix("198.51.100.0/24")
	p := netip.MustParsePrefix

	perNode, rest := podCIDRs(sub, 3)
	g.Expect(perNode).To(Equal([]netip.Prefix{p("198.51.100.0/26"), p("198.51.100.64/26"), p("198.51.100.128/26")}))
	g.Expect(rest).To(Equal(p("198.51.100.192/26")))

	perNode, rest = podCIDRs(sub, 1)
	g.Expect(perNode).To(Equal([]netip.Prefix{p("198.51.100.0/25")}))
	g.Expect(rest).To(Equal(p("198.51.100.128/25")))

	perNode, rest = podCIDRs(sub, 15)
	g.Expect(perNode).To(HaveLen(15))
	g.Expect(perNode[14]).To(Equal(p("198.51.100.224/28")))
	g.Expect(rest).To(Equal(p("198.51.100.240/28")))

	// Too many nodes for a /28 each: one shared pool.
	perNode, rest = podCIDRs(sub, 16)
	g.Expect(perNode).To(BeNil())
	g.Expect(rest).To(Equal(sub))

	l := &Lab{Nodes: []string{"node-0", "node-1"}, PodSubnet: p("203.0.113.0/24")}
	g.Expect(l.PodCIDR("node-1")).To(Equal(p("203.0.113.64/26")))
	g.Expect(l.PodCIDR("other").IsValid()).To(BeFalse())
	g.Expect((&Lab{Nodes: []string{"node-0"}}).PodCIDR("node-0").IsValid()).To(BeFalse(), "no network")
}

func TestPodSubnetDefault(t *testing.T) {
	g := NewWithT(t)
	o := Options{Name: "x", Dir: "d", BinDir: "b", Network: true}
	g.Expect(o.setDefaults()).To(Succeed())
	g.Expect(o.PodSubnet).To(Equal(netip.MustParsePrefix("203.0.113.0/24")))
	o = Options{Name: "x", Dir: "d", BinDir: "b", Network: true, Subnet: netip.MustParsePrefix("203.0.113.0/24")}
	g.Expect(o.setDefaults()).To(Succeed())
	g.Expect(o.PodSubnet).To(Equal(netip.MustParsePrefix("198.51.100.0/24")))
	o = Options{Name: "x", Dir: "d", BinDir: "b"}
	g.Expect(o.setDefaults()).To(Succeed())
	g.Expect(o.PodSubnet.IsValid()).To(BeFalse(), "kwok's default without the network")
}
