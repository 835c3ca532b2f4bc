package netconf

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/packet"
	"github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// These tests program real kernels: each builds the namespaces of
// topology_test.go, runs a Dataplane against the node namespace, and
// checks what the client and the pod observe.

func newDataplane(t testing.TB, topo *topology, mutate ...func(*Options)) *Dataplane {
	t.Helper()
	opts := Options{NetNSPath: topo.node.path(), ExcludeSNAT: excludeAll, Log: testr.NewWithInterface(t, testr.Options{})}
	for _, m := range mutate {
		m(&opts)
	}
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func apply(t testing.TB, d *Dataplane, desired ...Assignment) Report {
	t.Helper()
	r, err := d.Apply(context.Background(), desired)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return r
}

func port(a netip.Addr, p uint16) netip.AddrPort { return netip.AddrPortFrom(a, p) }

func TestIPv4TrafficInAndOut(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	// Let the client learn from gratuitous ARP alone: without arp_accept
	// Linux only updates entries it already has (see the stale-entry test).
	sysctl(t, topo.client, "net.ipv4.conf.eth0.arp_accept", "1")
	rootForward, err := readRootSysctl("/proc/sys/net/ipv4/ip_forward")
	g.Expect(err).NotTo(gomega.HaveOccurred())

	d := newDataplane(t, topo)
	r := apply(t, d, Assignment{Address: staticV4, PodIP: podV4})
	g.Expect(r.Added).To(gomega.Equal([]Assignment{{Address: staticV4, PodIP: podV4, Interface: "eth0"}}))
	g.Expect(r.Errors).To(gomega.BeEmpty())

	// Announced: the client knows the address at the node's MAC before it
	// ever sent anything to it.
	expectNeighbour(g, topo.client, staticV4, topo.nodeMAC)

	// Ingress: the client reaches the pod's server through the address,
	// and the pod sees the client's own address.
	serve(t, topo.pod, port(podV4, 8080), false)
	g.Expect(through(g, topo.client, port(staticV4, 8080))).To(gomega.Equal(seen{peer: clientV4, server: podV4}))
	// So does the node's own traffic to the address (the output chain).
	g.Expect(through(g, topo.node, port(staticV4, 8080)).server).To(gomega.Equal(podV4))

	// Egress: the pod's traffic leaves with the address as source, over a
	// path only kubext's uplink table knows (the main table says
	// unreachable).
	serve(t, topo.client, port(farV4, 8081), false)
	g.Expect(through(g, topo.pod, port(farV4, 8081)).peer).To(gomega.Equal(staticV4))

	// Excluded destinations keep the pod's own source and normal routing.
	serve(t, topo.client, port(clientV4, 8082), false)
	g.Expect(through(g, topo.pod, port(clientV4, 8082)).peer).To(gomega.Equal(podV4))

	// The address: a /32 on eth0 marked as kubext's, no prefix route.
	addrs, err := topo.node.nl.AddrList(eth0Of(t, topo.node), unix.AF_INET)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	var found *netlink.Addr
	for i := range addrs {
		if addrs[i].IP.Equal(staticV4.AsSlice()) {
			found = &addrs[i]
		}
	}
	g.Expect(found).NotTo(gomega.BeNil())
	ones, _ := found.Mask.Size()
	g.Expect(ones).To(gomega.Equal(32))
	g.Expect(found.Label).To(gomega.Equal("eth0:kx"))
	g.Expect(found.Flags & unix.IFA_F_NOPREFIXROUTE).NotTo(gomega.BeZero())

	// Forwarding was turned on in the node namespace only.
	g.Expect(sysctl(t, topo.node, "net.ipv4.ip_forward")).To(gomega.Equal("1"))
	g.Expect(readRootSysctl("/proc/sys/net/ipv4/ip_forward")).To(gomega.Equal(rootForward))
}

func TestIPv6TrafficInAndOut(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	// An unsolicited advertisement only updates existing entries.
	staleNeighbour(t, topo.client, staticV6)

	d := newDataplane(t, topo)
	r := apply(t, d, Assignment{Address: staticV6, PodIP: podV6, Interface: "eth0"})
	g.Expect(r.Added).To(gomega.HaveLen(1))

	expectNeighbour(g, topo.client, staticV6, topo.nodeMAC)

	serve(t, topo.pod, port(podV6, 8080), false)
	g.Expect(through(g, topo.client, port(staticV6, 8080))).To(gomega.Equal(seen{peer: clientV6, server: podV6}))

	serve(t, topo.client, port(clientV6, 8081), false)
	g.Expect(through(g, topo.pod, port(clientV6, 8081)).peer).To(gomega.Equal(staticV6))

	g.Expect(sysctl(t, topo.node, "net.ipv6.conf.all.forwarding")).To(gomega.Equal("1"))
}

func TestApplyIsIdempotent(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	desired := []Assignment{
		{Address: staticV4, PodIP: podV4},
		{Address: staticV6, PodIP: podV6, Interface: "eth0"},
	}
	d := newDataplane(t, topo)
	writes := watchWrites(t, topo.node)
	r := apply(t, d, desired...)
	g.Expect(r.Added).To(gomega.HaveLen(2))
	g.Expect(writes()).NotTo(gomega.BeEmpty()) // the watch sees writes
	before := settledSnapshot(t, topo.node)

	writes = watchWrites(t, topo.node)
	r = apply(t, d, desired...)
	g.Expect(r.Changed()).To(gomega.BeFalse())
	g.Expect(r.Unchanged).To(gomega.HaveLen(2))
	g.Expect(writes()).To(gomega.BeEmpty())
	g.Expect(snapshot(t, topo.node)).To(gomega.Equal(before))

	// A restarted agent finds everything in place and changes nothing.
	restarted := newDataplane(t, topo)
	writes = watchWrites(t, topo.node)
	r = apply(t, restarted, desired...)
	g.Expect(r.Changed()).To(gomega.BeFalse())
	g.Expect(writes()).To(gomega.BeEmpty())
	g.Expect(snapshot(t, topo.node)).To(gomega.Equal(before))
}

func TestRemovalLeavesOthersAlone(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)

	// What others configured on the node, which forwards already as a
	// Kubernetes node does (forwarding stays on; with IPv6 it also brings
	// the kernel's subnet-router anycast routes).
	sysctl(t, topo.node, "net.ipv4.ip_forward", "1")
	sysctl(t, topo.node, "net.ipv6.conf.all.forwarding", "1")
	eth0 := eth0Of(t, topo.node)
	for _, c := range []string{"203.0.113.3/24", "203.0.113.11/32"} {
		a, err := netlink.ParseAddr(c)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(topo.node.nl.AddrAdd(eth0, a)).To(gomega.Succeed())
	}
	foreignRule := netlink.NewRule()
	foreignRule.Priority, foreignRule.Table, foreignRule.Src = DefaultRulePriority, 100, mustCIDR("192.0.2.99/32")
	g.Expect(topo.node.nl.RuleAdd(foreignRule)).To(gomega.Succeed())
	route(t, topo.node, &netlink.Route{Table: 100, Gw: net.ParseIP("203.0.113.1")})
	foreignTable(t, topo)
	before := settledSnapshot(t, topo.node)

	d := newDataplane(t, topo)
	desired := []Assignment{
		{Address: staticV4, PodIP: podV4},
		{Address: staticV6, PodIP: podV6},
		{Address: netip.MustParseAddr("203.0.113.11"), PodIP: podV4b}, // someone else's address
	}
	r, err := d.Apply(context.Background(), desired)
	g.Expect(err).To(gomega.HaveOccurred())
	g.Expect(r.Added).To(gomega.HaveLen(2))
	g.Expect(r.Errors).To(gomega.HaveKey(netip.MustParseAddr("203.0.113.11")))
	g.Expect(snapshot(t, topo.node)).NotTo(gomega.Equal(before))

	r = apply(t, d)
	g.Expect(r.Removed).To(gomega.ConsistOf(
		Assignment{Address: staticV4, PodIP: podV4, Interface: "eth0"},
		Assignment{Address: staticV6, PodIP: podV6, Interface: "eth0"},
	))
	expectSameLines(t, snapshot(t, topo.node), before)

	apply(t, d, desired[:2]...)
	g.Expect(d.Flush(context.Background())).To(gomega.Succeed())
	expectSameLines(t, snapshot(t, topo.node), before)
	current, err := d.Current()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(current).To(gomega.BeEmpty())
}

func TestCurrentAfterRestart(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	d := newDataplane(t, topo)
	apply(t, d,
		Assignment{Address: staticV4, PodIP: podV4},
		Assignment{Address: staticV4b, PodIP: podV4b, Interface: "eth0"},
		Assignment{Address: staticV6, PodIP: podV6},
	)
	g.Expect(d.Close()).To(gomega.Succeed())

	restarted := newDataplane(t, topo)
	want := []Assignment{
		{Address: staticV4, PodIP: podV4, Interface: "eth0"},
		{Address: staticV4b, PodIP: podV4b, Interface: "eth0"},
		{Address: staticV6, PodIP: podV6, Interface: "eth0"},
	}
	g.Expect(restarted.Current()).To(gomega.Equal(want))

	// Current reports what is there: an address someone removed is no
	// longer on an interface nor forwarding (its NAT entries are a trace
	// left of it), and the next Apply puts it back.
	a, err := netlink.ParseAddr(staticV4b.String() + "/32")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(topo.node.nl.AddrDel(eth0Of(t, topo.node), a)).To(gomega.Succeed())
	g.Expect(restarted.Current()).To(gomega.Equal([]Assignment{want[0], {Address: staticV4b}, want[2]}))
	r := apply(t, restarted, want...)
	g.Expect(r.Updated).To(gomega.Equal([]Assignment{want[1]}))
	g.Expect(restarted.Current()).To(gomega.Equal(want))

	// Another tool flushes the whole nftables ruleset (as a firewall
	// service restart does): the addresses stay, their NAT is gone, and
	// the next Apply rewrites the table.
	c := &nftables.Conn{NetNS: int(topo.node.h)}
	c.FlushRuleset()
	g.Expect(c.Flush()).To(gomega.Succeed())
	current, err := restarted.Current()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(current).To(gomega.HaveLen(3))
	g.Expect(current[0].PodIP.IsValid()).To(gomega.BeFalse())
	r = apply(t, restarted, want...)
	g.Expect(r.Updated).To(gomega.Equal(want))
	g.Expect(restarted.Current()).To(gomega.Equal(want))
	serve(t, topo.pod, port(podV4, 8080), false)
	g.Expect(through(g, topo.client, port(staticV4, 8080)).server).To(gomega.Equal(podV4))
}

func TestPodChange(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	serve(t, topo.pod, port(podV4, 8080), false)
	serve(t, topo.pod, port(podV4b, 8080), false)
	d := newDataplane(t, topo)

	apply(t, d, Assignment{Address: staticV4, PodIP: podV4})
	g.Expect(through(g, topo.client, port(staticV4, 8080)).server).To(gomega.Equal(podV4))

	// A standby takes over: same address, another pod.
	r := apply(t, d, Assignment{Address: staticV4, PodIP: podV4b})
	g.Expect(r.Updated).To(gomega.Equal([]Assignment{{Address: staticV4, PodIP: podV4b, Interface: "eth0"}}))
	g.Expect(through(g, topo.client, port(staticV4, 8080)).server).To(gomega.Equal(podV4b))

	// Egress follows: the new holder leaves as the address, the previous
	// one with its own source again.
	otherV4 := netip.MustParseAddr("203.0.113.5")
	addAddrs(t, topo.client, "lo", otherV4.String()+"/32")
	serve(t, topo.client, port(otherV4, 8081), false)
	g.Expect(throughFrom(g, topo.pod, podV4b, port(otherV4, 8081)).peer).To(gomega.Equal(staticV4))
	g.Expect(throughFrom(g, topo.pod, podV4, port(otherV4, 8081)).peer).To(gomega.Equal(podV4))
}

func TestConntrackFlushed(t *testing.T) {
	topo := newTopology(t)
	if err := conntrackAvailable(topo.node); err != nil {
		t.Skip(err.Error())
	}
	g := gomega.NewWithT(t)
	otherV4 := netip.MustParseAddr("203.0.113.5")
	addAddrs(t, topo.client, "lo", otherV4.String()+"/32")
	serve(t, topo.client, port(otherV4, 8090), true)
	serve(t, topo.pod, port(podV4, 8080), true)

	// Before the pod holds the address, a CNI-style masquerade sends its
	// traffic out as the node (which forwards, as Kubernetes nodes do).
	sysctl(t, topo.node, "net.ipv4.ip_forward", "1")
	masquerade(t, topo)
	s, before, err := dialFrom(topo.pod, podV4, port(otherV4, 8090), true)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	defer before.Close()
	g.Expect(s.peer).To(gomega.Equal(nodeV4))
	g.Expect(flows(t, topo.node, func(f *netlink.ConntrackFlow) bool {
		return ipAddr(f.Forward.SrcIP) == podV4 && ipAddr(f.Reverse.DstIP) == nodeV4
	})).To(gomega.Equal(1))

	// Taking the address over deletes that flow: it would keep the node's
	// address as its source for as long as it lives.
	d := newDataplane(t, topo)
	apply(t, d, Assignment{Address: staticV4, PodIP: podV4})
	g.Expect(flows(t, topo.node, func(f *netlink.ConntrackFlow) bool {
		return ipAddr(f.Forward.SrcIP) == podV4 && ipAddr(f.Reverse.DstIP) == nodeV4
	})).To(gomega.Equal(0))

	// Established flows in both directions through the address.
	_, in, err := dial(topo.client, port(staticV4, 8080), true)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	defer in.Close()
	s, out, err := dialFrom(topo.pod, podV4, port(otherV4, 8090), true)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	defer out.Close()
	g.Expect(s.peer).To(gomega.Equal(staticV4))
	ofAddress := func(f *netlink.ConntrackFlow) bool {
		return ipAddr(f.Forward.DstIP) == staticV4 || ipAddr(f.Reverse.DstIP) == staticV4
	}
	g.Expect(flows(t, topo.node, ofAddress)).To(gomega.Equal(2))

	// The address leaves: no NAT state of it stays behind.
	apply(t, d)
	g.Expect(flows(t, topo.node, ofAddress)).To(gomega.Equal(0))
}

func TestAnnouncementSchedule(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	ifi := &net.Interface{Index: eth0Of(t, topo.client).Attrs().Index, Name: "eth0"}
	var capture *packet.Conn
	g.Expect(topo.client.do(func() error {
		var err error
		capture, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ARP, nil)
		return err
	})).To(gomega.Succeed())
	defer capture.Close()

	d := newDataplane(t, topo)
	start := time.Now()
	apply(t, d, Assignment{Address: staticV4, PodIP: podV4})

	// Three rounds (at once, +250ms, +1s) of a request and a reply.
	want, err := garpFrames(topo.nodeMAC, staticV4)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	var got [][]byte
	buf := make([]byte, 1500)
	deadline := start.Add(3 * time.Second)
	for range 100 {
		if len(got) == 3*len(want) || time.Now().After(deadline) {
			break
		}
		_ = capture.SetReadDeadline(deadline)
		n, _, err := capture.ReadFrom(buf)
		if err != nil {
			break
		}
		frame := buf[:n]
		if isFrameOneOf(frame, want) {
			got = append(got, append([]byte(nil), frame...))
		}
	}
	g.Expect(got).To(gomega.HaveLen(3 * len(want)))
	// Nothing more arrives after the schedule ends.
	_ = capture.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	for range 100 {
		n, _, err := capture.ReadFrom(buf)
		if err != nil {
			break
		}
		g.Expect(isFrameOneOf(buf[:n], want)).To(gomega.BeFalse())
	}
}

// A single, immediate announcement corrects a neighbour that still has
// the address at another MAC (the old holder): the failover case.
func TestImmediateAnnouncementUpdatesNeighbours(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	staleNeighbour(t, topo.client, staticV4)
	g.Expect(sysctl(t, topo.client, "net.ipv4.conf.eth0.arp_accept")).To(gomega.Equal("0"))

	d := newDataplane(t, topo, func(o *Options) { o.Announcements = []time.Duration{0} })
	apply(t, d, Assignment{Address: staticV4, PodIP: podV4})
	expectNeighbour(g, topo.client, staticV4, topo.nodeMAC)
}

// expectSameLines compares snapshots, reporting the lines that differ.
func expectSameLines(t *testing.T, got, want string) {
	t.Helper()
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
	for _, l := range gotLines {
		if !slices.Contains(wantLines, l) {
			t.Errorf("unexpected: %s", l)
		}
	}
	for _, l := range wantLines {
		if !slices.Contains(gotLines, l) {
			t.Errorf("missing: %s", l)
		}
	}
}

// staleNeighbour makes n's neighbour cache hold ip at another MAC: what a
// neighbour of the previous holder has.
func staleNeighbour(t *testing.T, n *testNS, ip netip.Addr) {
	t.Helper()
	fam := unix.AF_INET
	if ip.Is6() {
		fam = unix.AF_INET6
	}
	err := n.nl.NeighSet(&netlink.Neigh{
		LinkIndex: eth0Of(t, n).Attrs().Index, Family: fam, State: netlink.NUD_STALE,
		IP: ip.AsSlice(), HardwareAddr: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99},
	})
	if err != nil {
		t.Fatalf("%s: %v", n.name, err)
	}
}

// expectNeighbour waits (briefly) until n's neighbour cache has ip at hw.
func expectNeighbour(g gomega.Gomega, n *testNS, ip netip.Addr, hw net.HardwareAddr) {
	g.Eventually(func() (net.HardwareAddr, error) { return neighbour(n, ip) }).
		WithTimeout(2 * time.Second).WithPolling(10 * time.Millisecond).Should(gomega.Equal(hw))
}

// through connects from n to addr, which must work, and returns what the
// server saw.
func through(g gomega.Gomega, n *testNS, addr netip.AddrPort) seen {
	return throughFrom(g, n, netip.Addr{}, addr)
}

func throughFrom(g gomega.Gomega, n *testNS, from netip.Addr, addr netip.AddrPort) seen {
	s, _, err := dialFrom(n, from, addr, false)
	g.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred())
	return s
}

func isFrameOneOf(frame []byte, frames [][]byte) bool {
	for _, f := range frames {
		// Ignore padding a driver may add.
		if len(frame) >= len(f) && string(frame[:len(f)]) == string(f) {
			return true
		}
	}
	return false
}

// eth0Of returns the namespace's eth0.
func eth0Of(t *testing.T, n *testNS) netlink.Link {
	t.Helper()
	l, err := n.nl.LinkByName("eth0")
	if err != nil {
		t.Fatalf("%s: %v", n.name, err)
	}
	return l
}

// flows counts the node's IPv4 conntrack entries that match.
func flows(t *testing.T, n *testNS, match func(*netlink.ConntrackFlow) bool) int {
	t.Helper()
	all, err := n.nl.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, f := range all {
		if match(f) {
			count++
		}
	}
	return count
}

// foreignTable creates an nftables table that is not kubext's.
func foreignTable(t *testing.T, topo *topology) {
	t.Helper()
	c := &nftables.Conn{NetNS: int(topo.node.h)}
	tb := c.AddTable(&nftables.Table{Name: "kxnc-foreign", Family: nftables.TableFamilyINet})
	ch := c.AddChain(&nftables.Chain{Name: "input", Table: tb, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter})
	c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
}

// masquerade adds a table that masquerades traffic leaving the node's eth0,
// as CNIs do for pod traffic, at the usual srcnat priority.
func masquerade(t *testing.T, topo *topology) {
	t.Helper()
	c := &nftables.Conn{NetNS: int(topo.node.h)}
	tb := c.AddTable(&nftables.Table{Name: "kxnc-masq", Family: nftables.TableFamilyIPv4})
	ch := c.AddChain(&nftables.Chain{Name: "post", Table: tb, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIF, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: nativeUint32(uint32(topo.nodeUplink))},
		&expr.Masq{},
	}})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
}

// With a lifetime, the kernel removes addresses nobody refreshes: an agent
// killed without fencing stops answering by itself. Refreshed addresses
// stay.
func TestAddressLifetimeIsADeadMansSwitch(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	d := newDataplane(t, topo, func(o *Options) { o.AddressLifetime = time.Second })
	want := []Assignment{{Address: staticV4, PodIP: podV4, Interface: "eth0"}, {Address: staticV6, PodIP: podV6, Interface: "eth0"}}
	apply(t, d, want...)

	// Refreshed every 300 ms for 3 s: still there, and Apply sees no drift.
	for range 10 {
		g.Expect(d.Refresh()).To(gomega.Succeed())
		time.Sleep(300 * time.Millisecond)
	}
	g.Expect(d.Current()).To(gomega.Equal(want))
	g.Expect(apply(t, d, want...).Changed()).To(gomega.BeFalse())

	// Nobody refreshes (the agent was SIGKILLed): the kernel removes both
	// addresses within a few seconds.
	g.Eventually(func() ([]Assignment, error) {
		cur, err := d.Current()
		var left []Assignment
		for _, a := range cur {
			if a.Address.IsValid() {
				left = append(left, a)
			}
		}
		return left, err
	}, 10*time.Second, 200*time.Millisecond).Should(gomega.BeEmpty())
}

// An address the fabric routes (an EC2 VPC sends a secondary private IP
// to the ENI that holds it) is programmed in full but never announced:
// a neighbour's stale entry stays as it is, and traffic that the fabric
// delivers (here a permanent neighbour entry) reaches the pod and leaves
// from the address.
func TestFabricRoutedAddressIsNotAnnounced(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	staleNeighbour(t, topo.client, staticV4)
	sysctl(t, topo.client, "net.ipv4.conf.eth0.arp_accept", "1")
	d := newDataplane(t, topo, func(o *Options) { o.Announcements = []time.Duration{0, 300 * time.Millisecond} })
	r := apply(t, d, Assignment{Address: staticV4, PodIP: podV4, NoAnnounce: true})
	g.Expect(r.Errors).To(gomega.BeEmpty())
	g.Expect(r.Added).To(gomega.HaveLen(1))
	g.Consistently(func() (string, error) {
		hw, err := neighbour(topo.client, staticV4)
		return hw.String(), err
	}, time.Second, 50*time.Millisecond).Should(gomega.Equal("02:00:00:00:00:99"))

	err := topo.client.nl.NeighSet(&netlink.Neigh{
		LinkIndex: eth0Of(t, topo.client).Attrs().Index, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
		IP: staticV4.AsSlice(), HardwareAddr: topo.nodeMAC,
	})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	serve(t, topo.pod, port(podV4, 8080), false)
	g.Expect(through(g, topo.client, port(staticV4, 8080))).To(gomega.Equal(seen{peer: clientV4, server: podV4}))
	serve(t, topo.client, port(farV4, 8081), false)
	g.Expect(through(g, topo.pod, port(farV4, 8081)).peer).To(gomega.Equal(staticV4))
}
