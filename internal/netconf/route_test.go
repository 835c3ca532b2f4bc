package netconf

import (
	"net"
	"net/netip"
	"testing"

	"github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestUplinkRoutes(t *testing.T) {
	g := gomega.NewWithT(t)
	const table = DefaultRouteTableBase + 2
	main := append([]netlink.Route{
		{ // multipath: only the hop through eth0 is kept
			Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST, Dst: mustCIDR("100.64.0.0/10"), Priority: 10,
			MultiPath: []*netlink.NexthopInfo{{LinkIndex: 2, Gw: net.ParseIP("203.0.113.1")}, {LinkIndex: 3, Gw: net.ParseIP("198.51.100.1")}},
		},
		{Table: 100, Type: unix.RTN_UNICAST, LinkIndex: 2, Dst: mustCIDR("192.0.2.0/24")}, // not main
	}, mainTable...)
	exclude := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}

	v4 := uplinkRoutes(main, linkEth0.Index, table, unix.AF_INET, exclude)
	var got []string
	for _, r := range v4 {
		g.Expect(r.Table).To(gomega.Equal(table))
		g.Expect(r.Protocol).To(gomega.Equal(netlink.RouteProtocol(AddressProtocol)))
		got = append(got, keyOf(r).dst.String()+" "+routeContent(r))
	}
	g.Expect(got).To(gomega.Equal([]string{
		"100.64.0.0/10 type=1 link=2 gw=203.0.113.1 src=<nil> scope=0 flags=0 proto=107",
		"0.0.0.0/0 type=1 link=2 gw=203.0.113.1 src=<nil> scope=0 flags=0 proto=107",
		"203.0.113.0/24 type=1 link=2 gw=<nil> src=203.0.113.2 scope=253 flags=0 proto=107",
		"10.0.0.0/8 type=9 proto=107",
	}))
	g.Expect(v4[0].Priority).To(gomega.Equal(10)) // the multipath copy keeps its metric

	v6 := uplinkRoutes(main, linkEth0.Index, table, unix.AF_INET6, exclude)
	g.Expect(v6).To(gomega.HaveLen(2))
	g.Expect(v6[1].Type).To(gomega.Equal(unix.RTN_THROW))
	g.Expect(v6[1].Priority).To(gomega.Equal(ip6DefaultMetric))

	// Tables follow the rules: one per uplink and family in use.
	want := tableRoutes(map[ruleSpec]bool{{Pod: addrOf("10.0.0.1"), Table: table}: true}, main, DefaultRouteTableBase, exclude)
	g.Expect(want).To(gomega.HaveLen(len(v4)))
	for k := range want {
		g.Expect(k.family).To(gomega.Equal(unix.AF_INET))
	}
}
