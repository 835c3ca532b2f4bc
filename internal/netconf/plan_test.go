package netconf

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

var (
	linkEth0  = linkInfo{Index: 2, Name: "eth0", HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 1}}
	linkBond0 = linkInfo{Index: 3, Name: "bond0.100", HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	linkHuge  = linkInfo{Index: routeTableSpan, Name: "veth-huge"}
	testLinks = newLinkSet(linkEth0, linkBond0, linkHuge)

	mainTable = []netlink.Route{
		{Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST, Family: unix.AF_INET, LinkIndex: linkEth0.Index, Gw: net.ParseIP("203.0.113.1")}, // default
		{Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST, LinkIndex: linkEth0.Index, Dst: mustCIDR("203.0.113.0/24"), Scope: netlink.SCOPE_LINK, Src: net.ParseIP("203.0.113.2")},
		{Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST, LinkIndex: linkBond0.Index, Dst: mustCIDR("198.51.100.0/24"), Scope: netlink.SCOPE_LINK},
		{Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNREACHABLE, Dst: mustCIDR("198.51.100.128/25")},
		{Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST, LinkIndex: linkEth0.Index, Dst: mustCIDR("2001:db8:1::/64"), Priority: 256},
	}
)

func addrOf(s string) netip.Addr { return netip.MustParseAddr(s) }

var errTest = errors.New("test")

func TestResolve(t *testing.T) {
	tests := []struct {
		name    string
		desired []Assignment
		foreign map[netip.Addr]string
		want    []Assignment // resolved
		failed  []netip.Addr
	}{{
		name:    "named interface",
		desired: []Assignment{{Address: addrOf("198.51.100.10"), PodIP: addrOf("10.0.0.1"), Interface: "eth0"}},
		want:    []Assignment{{Address: addrOf("198.51.100.10"), PodIP: addrOf("10.0.0.1"), Interface: "eth0"}},
	}, {
		name: "interface of the longest matching route, else the default route",
		desired: []Assignment{
			{Address: addrOf("198.51.100.10"), PodIP: addrOf("10.0.0.1")},
			{Address: addrOf("192.0.2.10"), PodIP: addrOf("10.0.0.2")},
			{Address: addrOf("2001:db8:1::10"), PodIP: addrOf("fd00::1")},
		},
		want: []Assignment{
			{Address: addrOf("192.0.2.10"), PodIP: addrOf("10.0.0.2"), Interface: "eth0"},
			{Address: addrOf("198.51.100.10"), PodIP: addrOf("10.0.0.1"), Interface: "bond0.100"},
			{Address: addrOf("2001:db8:1::10"), PodIP: addrOf("fd00::1"), Interface: "eth0"},
		},
	}, {
		name:    "an unreachable route is no interface; nor is a missing IPv6 default",
		desired: []Assignment{{Address: addrOf("198.51.100.200"), PodIP: addrOf("10.0.0.1")}, {Address: addrOf("2001:db8:9::1"), PodIP: addrOf("fd00::1")}},
		failed:  []netip.Addr{addrOf("198.51.100.200"), addrOf("2001:db8:9::1")},
	}, {
		name:    "IPv4-mapped addresses are unmapped",
		desired: []Assignment{{Address: addrOf("::ffff:198.51.100.10"), PodIP: addrOf("::ffff:10.0.0.1"), Interface: "eth0"}},
		want:    []Assignment{{Address: addrOf("198.51.100.10"), PodIP: addrOf("10.0.0.1"), Interface: "eth0"}},
	}, {
		name: "invalid assignments fail alone",
		desired: []Assignment{
			{Address: addrOf("198.51.100.1"), PodIP: addrOf("fd00::1"), Interface: "eth0"},       // families differ
			{Address: addrOf("198.51.100.2"), PodIP: addrOf("198.51.100.2"), Interface: "eth0"},  // pod is the address
			{Address: addrOf("127.0.0.2"), PodIP: addrOf("10.0.0.3"), Interface: "eth0"},         // loopback
			{Address: addrOf("224.0.0.5"), PodIP: addrOf("10.0.0.4"), Interface: "eth0"},         // multicast
			{Address: addrOf("198.51.100.5"), PodIP: addrOf("10.0.0.5"), Interface: "eth9"},      // no such interface
			{Address: addrOf("198.51.100.6"), PodIP: addrOf("10.0.0.6"), Interface: "veth-huge"}, // index beyond the tables
			{Address: addrOf("198.51.100.7"), Interface: "eth0"},                                 // no pod
			{PodIP: addrOf("10.0.0.8"), Interface: "eth0"},                                       // no address
			{Address: addrOf("198.51.100.9"), PodIP: addrOf("10.0.0.9"), Interface: "eth0"},
		},
		want:   []Assignment{{Address: addrOf("198.51.100.9"), PodIP: addrOf("10.0.0.9"), Interface: "eth0"}},
		failed: []netip.Addr{addrOf("198.51.100.1"), addrOf("198.51.100.2"), addrOf("127.0.0.2"), addrOf("224.0.0.5"), addrOf("198.51.100.5"), addrOf("198.51.100.6"), addrOf("198.51.100.7"), {}},
	}, {
		name: "an address desired twice fails; a pod IP used twice fails for the later address",
		desired: []Assignment{
			{Address: addrOf("198.51.100.1"), PodIP: addrOf("10.0.0.1"), Interface: "eth0"},
			{Address: addrOf("198.51.100.1"), PodIP: addrOf("10.0.0.2"), Interface: "eth0"},
			{Address: addrOf("198.51.100.3"), PodIP: addrOf("10.0.0.3"), Interface: "eth0"},
			{Address: addrOf("198.51.100.2"), PodIP: addrOf("10.0.0.3"), Interface: "eth0"},
		},
		want:   []Assignment{{Address: addrOf("198.51.100.2"), PodIP: addrOf("10.0.0.3"), Interface: "eth0"}},
		failed: []netip.Addr{addrOf("198.51.100.1"), addrOf("198.51.100.3")},
	}, {
		name:    "an address someone else configured is not taken",
		desired: []Assignment{{Address: addrOf("198.51.100.10"), PodIP: addrOf("10.0.0.1"), Interface: "eth0"}},
		foreign: map[netip.Addr]string{addrOf("198.51.100.10"): "eth1"},
		failed:  []netip.Addr{addrOf("198.51.100.10")},
	}, {
		name:    "the node's gateway is never taken",
		desired: []Assignment{{Address: addrOf("203.0.113.1"), PodIP: addrOf("10.0.0.1")}, {Address: addrOf("203.0.113.9"), PodIP: addrOf("10.0.0.2")}},
		want:    []Assignment{{Address: addrOf("203.0.113.9"), PodIP: addrOf("10.0.0.2"), Interface: "eth0"}},
		failed:  []netip.Addr{addrOf("203.0.113.1")},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := gomega.NewWithT(t)
			targets, failed := resolve(tt.desired, testLinks, mainTable, tt.foreign)
			var got []Assignment
			for _, tg := range targets {
				got = append(got, tg.Assignment)
				g.Expect(tg.link.Name).To(gomega.Equal(tg.Interface))
			}
			g.Expect(got).To(gomega.Equal(tt.want))
			var failedAddrs []netip.Addr
			for k, err := range failed {
				g.Expect(err).To(gomega.HaveOccurred())
				failedAddrs = append(failedAddrs, k)
			}
			g.Expect(failedAddrs).To(gomega.ConsistOf(tt.failed))
		})
	}
}

func TestOptions(t *testing.T) {
	g := gomega.NewWithT(t)
	o, err := Options{}.withDefaults()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(o.TableName).To(gomega.Equal("kubext"))
	g.Expect(o.RouteTableBase).To(gomega.Equal(DefaultRouteTableBase))
	g.Expect(o.RulePriority).To(gomega.Equal(DefaultRulePriority))
	g.Expect(o.Announcements).To(gomega.Equal([]time.Duration{0, 250 * time.Millisecond, time.Second}))

	for _, bad := range []Options{
		{RouteTableBase: 254},
		{RulePriority: 32766},
		{ExcludeSNAT: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/8")}},
		{Announcements: []time.Duration{time.Second}},
		{Announcements: []time.Duration{0, time.Second, time.Second}},
		{Announcements: []time.Duration{0, 2 * time.Minute}},
		{Announcements: make([]time.Duration, 17)},
	} {
		_, err := bad.withDefaults()
		g.Expect(err).To(gomega.HaveOccurred(), "%+v", bad)
	}
}

// planTarget is a resolved assignment on eth0.
func planTarget(addr, pod string) target {
	return target{Assignment: Assignment{Address: addrOf(addr), PodIP: addrOf(pod), Interface: linkEth0.Name}, link: linkEth0}
}

// programmed is the kernel state of targets fully programmed.
func programmed(opts Options, ts ...target) state {
	s := state{nat: newNATState(), rules: map[ruleSpec]bool{}, foreign: map[netip.Addr]string{}}
	for _, t := range ts {
		s.addrs = append(s.addrs, hostAddr{IP: t.Address, PrefixLen: t.Address.BitLen(), LinkIndex: t.link.Index, linkName: t.link.Name, owned: true})
		s.nat.dnat[t.Address] = t.PodIP
		s.nat.snat[snatKey{Pod: t.PodIP, Link: t.link.Index}] = t.Address
		s.rules[ruleSpec{Pod: t.PodIP, Table: opts.RouteTableBase + t.link.Index}] = true
	}
	return s
}

func TestMakePlan(t *testing.T) {
	opts, err := Options{ExcludeSNAT: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	x := planTarget("198.51.100.10", "10.0.0.1")
	y := planTarget("198.51.100.20", "10.0.0.2")
	xOnBond := x
	xOnBond.link, xOnBond.Interface = linkBond0, linkBond0.Name
	xOtherPod := planTarget("198.51.100.10", "10.0.0.9")

	t.Run("new addresses are added, announced and their flows flushed", func(t *testing.T) {
		g := gomega.NewWithT(t)
		p := makePlan([]target{x}, map[netip.Addr]error{}, programmed(opts), opts, false, nil)
		r := p.finish()
		g.Expect(r.Added).To(gomega.Equal([]Assignment{x.Assignment}))
		g.Expect(p.addrAdd).To(gomega.Equal([]target{x}))
		g.Expect(p.announce).To(gomega.Equal([]target{x}))
		g.Expect(p.stale.addrs).To(gomega.Equal(map[netip.Addr]bool{x.Address: true}))
		g.Expect(p.stale.pods).To(gomega.Equal(map[netip.Addr]bool{x.PodIP: true}))
		g.Expect(p.nat.dnat).To(gomega.Equal(map[netip.Addr]netip.Addr{x.Address: x.PodIP}))
		g.Expect(p.nat.snat).To(gomega.Equal(map[snatKey]netip.Addr{{Pod: x.PodIP, Link: linkEth0.Index}: x.Address}))
		g.Expect(p.rules).To(gomega.Equal(map[ruleSpec]bool{{Pod: x.PodIP, Table: opts.RouteTableBase + linkEth0.Index}: true}))
		g.Expect(p.families).To(gomega.Equal(families{v4: true}))
	})

	t.Run("programmed addresses are unchanged; only a fresh process announces them", func(t *testing.T) {
		g := gomega.NewWithT(t)
		cur := programmed(opts, x, y)
		p := makePlan([]target{x, y}, map[netip.Addr]error{}, cur, opts, false, map[netip.Addr]bool{y.Address: true})
		r := p.finish()
		g.Expect(r.Changed()).To(gomega.BeFalse())
		g.Expect(r.Unchanged).To(gomega.HaveLen(2))
		g.Expect(p.addrAdd).To(gomega.BeEmpty())
		g.Expect(p.addrDel).To(gomega.BeEmpty())
		g.Expect(p.announce).To(gomega.Equal([]target{y})) // its last announcement failed
		g.Expect(p.stale.families()).To(gomega.Equal(families{}))

		p = makePlan([]target{x, y}, map[netip.Addr]error{}, cur, opts, true, nil)
		g.Expect(p.announce).To(gomega.Equal([]target{x, y}))
	})

	t.Run("an address the fabric routes is programmed in full but never announced", func(t *testing.T) {
		g := gomega.NewWithT(t)
		quiet := x
		quiet.NoAnnounce = true
		p := makePlan([]target{quiet, y}, map[netip.Addr]error{}, programmed(opts), opts, true, map[netip.Addr]bool{x.Address: true})
		r := p.finish()
		g.Expect(r.Added).To(gomega.HaveLen(2))
		g.Expect(p.addrAdd).To(gomega.Equal([]target{quiet, y}))
		g.Expect(p.nat.dnat).To(gomega.HaveKeyWithValue(x.Address, x.PodIP))
		g.Expect(p.nat.snat).To(gomega.HaveKeyWithValue(snatKey{Pod: x.PodIP, Link: linkEth0.Index}, x.Address))
		g.Expect(p.announce).To(gomega.Equal([]target{y}))

		// Programmed already, on a fresh process and after a failed
		// announcement: still not announced.
		p = makePlan([]target{quiet}, map[netip.Addr]error{}, programmed(opts, x), opts, true, map[netip.Addr]bool{x.Address: true})
		g.Expect(p.finish().Unchanged).To(gomega.HaveLen(1))
		g.Expect(p.announce).To(gomega.BeEmpty())
	})

	t.Run("a new pod updates the address and flushes both pods' flows", func(t *testing.T) {
		g := gomega.NewWithT(t)
		p := makePlan([]target{xOtherPod}, map[netip.Addr]error{}, programmed(opts, x), opts, false, nil)
		r := p.finish()
		g.Expect(r.Updated).To(gomega.Equal([]Assignment{xOtherPod.Assignment}))
		g.Expect(p.addrAdd).To(gomega.BeEmpty()) // the address stays where it is
		g.Expect(p.stale.pods).To(gomega.Equal(map[netip.Addr]bool{x.PodIP: true, xOtherPod.PodIP: true}))
		g.Expect(p.nat.snat).To(gomega.HaveLen(1))
		g.Expect(p.rules).To(gomega.HaveKey(ruleSpec{Pod: xOtherPod.PodIP, Table: opts.RouteTableBase + linkEth0.Index}))
	})

	t.Run("a new interface moves the address", func(t *testing.T) {
		g := gomega.NewWithT(t)
		p := makePlan([]target{xOnBond}, map[netip.Addr]error{}, programmed(opts, x), opts, false, nil)
		r := p.finish()
		g.Expect(r.Updated).To(gomega.Equal([]Assignment{xOnBond.Assignment}))
		g.Expect(p.addrDel).To(gomega.HaveLen(1))
		g.Expect(p.addrDel[0].LinkIndex).To(gomega.Equal(linkEth0.Index))
		g.Expect(p.addrAdd).To(gomega.Equal([]target{xOnBond}))
	})

	t.Run("a missing piece is repaired as an update", func(t *testing.T) {
		g := gomega.NewWithT(t)
		cur := programmed(opts, x)
		cur.rules = map[ruleSpec]bool{}
		r := makePlan([]target{x}, map[netip.Addr]error{}, cur, opts, false, nil).finish()
		g.Expect(r.Updated).To(gomega.Equal([]Assignment{x.Assignment}))

		cur = programmed(opts, x)
		cur.nat.snat[snatKey{Pod: addrOf("10.0.0.7"), Link: linkEth0.Index}] = x.Address // a previous holder's
		r = makePlan([]target{x}, map[netip.Addr]error{}, cur, opts, false, nil).finish()
		g.Expect(r.Updated).To(gomega.Equal([]Assignment{x.Assignment}))
	})

	t.Run("undesired addresses are removed, including partial leftovers", func(t *testing.T) {
		g := gomega.NewWithT(t)
		cur := programmed(opts, x)
		cur.nat.dnat[addrOf("198.51.100.30")] = addrOf("10.0.0.3") // NAT without an address
		p := makePlan(nil, map[netip.Addr]error{}, cur, opts, false, nil)
		r := p.finish()
		g.Expect(r.Removed).To(gomega.Equal([]Assignment{
			{Address: x.Address, PodIP: x.PodIP, Interface: "eth0"},
			{Address: addrOf("198.51.100.30"), PodIP: addrOf("10.0.0.3")},
		}))
		g.Expect(p.addrDel).To(gomega.HaveLen(1))
		g.Expect(p.nat.dnat).To(gomega.BeEmpty())
		g.Expect(p.rules).To(gomega.BeEmpty())
		g.Expect(p.stale.addrs).To(gomega.HaveLen(2))
	})

	t.Run("failed addresses keep what they have", func(t *testing.T) {
		g := gomega.NewWithT(t)
		failed := map[netip.Addr]error{x.Address: errTest}
		p := makePlan(nil, failed, programmed(opts, x, y), opts, false, nil)
		r := p.finish()
		g.Expect(r.Removed).To(gomega.Equal([]Assignment{{Address: y.Address, PodIP: y.PodIP, Interface: "eth0"}}))
		g.Expect(r.Errors).To(gomega.HaveKey(x.Address))
		g.Expect(p.addrDel).To(gomega.HaveLen(1))
		g.Expect(p.addrDel[0].IP).To(gomega.Equal(y.Address))
		g.Expect(p.nat.dnat).To(gomega.Equal(map[netip.Addr]netip.Addr{x.Address: x.PodIP}))
		g.Expect(p.nat.snat).To(gomega.HaveLen(1))
		g.Expect(p.rules).To(gomega.HaveLen(1))
	})

	t.Run("a failed change is reported as failed only; a failed announcement as both", func(t *testing.T) {
		g := gomega.NewWithT(t)
		p := makePlan([]target{x, y}, map[netip.Addr]error{}, programmed(opts), opts, false, nil)
		p.fail(x.Address, errTest)
		p.failAnnouncement(y.Address, errTest)
		r := p.finish()
		g.Expect(r.Added).To(gomega.Equal([]Assignment{y.Assignment}))
		g.Expect(r.Errors).To(gomega.HaveLen(2))
	})
}

func TestCurrentAssignments(t *testing.T) {
	g := gomega.NewWithT(t)
	opts, _ := Options{}.withDefaults()
	x := planTarget("198.51.100.10", "10.0.0.1")
	cur := programmed(opts, x)
	cur.addrs = append(cur.addrs, hostAddr{IP: addrOf("198.51.100.5"), PrefixLen: 32, LinkIndex: linkBond0.Index, owned: true})
	g.Expect(cur.assignments(testLinks, opts.RouteTableBase)).To(gomega.Equal([]Assignment{
		{Address: addrOf("198.51.100.5"), Interface: "bond0.100"}, // no NAT: PodIP invalid
		x.Assignment,
	}))

	// Forwarding is complete only with DNAT, SNAT and the rule; NAT entries
	// of an address no longer on an interface still count as a trace.
	for name, breakIt := range map[string]func(*state){
		"no SNAT": func(s *state) { clear(s.nat.snat) },
		"no rule": func(s *state) { clear(s.rules) },
		"SNAT through another interface": func(s *state) {
			clear(s.nat.snat)
			s.nat.snat[snatKey{Pod: x.PodIP, Link: linkBond0.Index}] = x.Address
		},
	} {
		s := programmed(opts, x)
		breakIt(&s)
		g.Expect(s.assignments(testLinks, opts.RouteTableBase)).To(gomega.Equal([]Assignment{{Address: x.Address, Interface: x.Interface}}), name)
	}
	s := programmed(opts, x)
	s.addrs = nil
	g.Expect(s.assignments(testLinks, opts.RouteTableBase)).To(gomega.Equal([]Assignment{{Address: x.Address}}))
	clear(s.nat.dnat)
	g.Expect(s.assignments(testLinks, opts.RouteTableBase)).To(gomega.Equal([]Assignment{{Address: x.Address}}), "SNAT entry only")
}

func TestAddressOwnership(t *testing.T) {
	tests := []struct {
		addr hostAddr
		link string
		want bool
	}{
		{hostAddr{IP: addrOf("198.51.100.1"), PrefixLen: 32, Proto: AddressProtocol}, "eth0", true},
		{hostAddr{IP: addrOf("2001:db8::1"), PrefixLen: 128, Proto: AddressProtocol}, "eth0", true},
		{hostAddr{IP: addrOf("198.51.100.1"), PrefixLen: 32, Label: "eth0:kx"}, "eth0", true}, // kernel without IFA_PROTO
		{hostAddr{IP: addrOf("198.51.100.1"), PrefixLen: 32, Label: "eth1:kx"}, "eth0", false},
		{hostAddr{IP: addrOf("198.51.100.1"), PrefixLen: 24, Proto: AddressProtocol}, "eth0", false},
		{hostAddr{IP: addrOf("198.51.100.1"), PrefixLen: 32}, "eth0", false},
		{hostAddr{IP: addrOf("198.51.100.1"), PrefixLen: 32, Proto: 3}, "eth0", false},
	}
	for _, tt := range tests {
		if got := tt.addr.ownedBy(tt.link); got != tt.want {
			t.Errorf("%+v on %s: owned %t, want %t", tt.addr, tt.link, got, tt.want)
		}
	}
	if got := addrLabel("enp0s31f6.100"); got != "" {
		t.Errorf("label %q does not fit IFNAMSIZ", got)
	}
	if got := addrLabel("bond0.100"); got != "bond0.100:kx" {
		t.Errorf("label %q", got)
	}
}

func FuzzParseAddr(f *testing.F) {
	f.Add([]byte{2, 32, 0x80, 0, 2, 0, 0, 0, 8, 0, 2, 0, 203, 0, 113, 10, 5, 0, 11, 0, AddressProtocol, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := parseAddr(b)
		if err == nil && a.IP.IsValid() && a.IP.Is4In6() {
			t.Errorf("address %s not unmapped", a.IP)
		}
	})
}
