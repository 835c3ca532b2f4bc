package netconf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The test topology lives entirely in network namespaces the tests create
// (and delete, also when a test fails); the root namespace is not touched.
//
//	kxnc-client                     kxnc-node                       kxnc-pod
//	eth0 203.0.113.1/24  <--veth--> eth0 203.0.113.2/24
//	     2001:db8:1::1/64                2001:db8:1::2/64
//	lo   203.0.113.200/32               kxveth0 192.0.2.1/24 <--veth--> eth0 192.0.2.2/24
//	                                            2001:db8:2::1/64            2001:db8:2::2/64
//
// The node's main table: default via the client; unreachable
// 203.0.113.192/26, so only kubext's uplink table leads the pod to the
// client's 203.0.113.200 (policy routing is what makes it reachable).
const (
	nsNode   = "kxnc-node"
	nsPod    = "kxnc-pod"
	nsClient = "kxnc-client"
)

var (
	staticV4   = netip.MustParseAddr("203.0.113.10")
	staticV4b  = netip.MustParseAddr("203.0.113.20")
	staticV6   = netip.MustParseAddr("2001:db8:1::10")
	podV4      = netip.MustParseAddr("192.0.2.2")
	podV4b     = netip.MustParseAddr("192.0.2.3")
	podV6      = netip.MustParseAddr("2001:db8:2::2")
	clientV4   = netip.MustParseAddr("203.0.113.1")
	clientV6   = netip.MustParseAddr("2001:db8:1::1")
	farV4      = netip.MustParseAddr("203.0.113.200") // reachable from the pod only by policy routing
	nodeV4     = netip.MustParseAddr("203.0.113.2")
	excludeAll = []netip.Prefix{
		netip.MustParsePrefix("192.0.2.0/24"),
		netip.MustParsePrefix("203.0.113.1/32"),
		netip.MustParsePrefix("2001:db8:2::/64"),
	}
)

// testNS is one namespace of the topology.
type testNS struct {
	name string
	h    netns.NsHandle
	nl   *netlink.Handle
}

func (n *testNS) path() string { return filepath.Join("/run/netns", n.name) }

// do runs fn on a thread in the namespace.
func (n *testNS) do(fn func() error) error { return inNetNS(n.h, fn) }

type topology struct {
	node, pod, client *testNS
	nodeMAC           net.HardwareAddr
	nodeUplink        int // index of the node's eth0
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
}

// newTopology builds the namespaces and links; t.Cleanup removes them.
func newTopology(t testing.TB) *topology {
	t.Helper()
	needRoot(t)
	g := gomega.NewWithT(t)
	topo := &topology{}
	topo.node = newTestNS(t, nsNode)
	topo.pod = newTestNS(t, nsPod)
	topo.client = newTestNS(t, nsClient)

	// Links, created from the node namespace straight into their peers'.
	g.Expect(topo.node.nl.LinkAdd(&netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0", PeerNamespace: netlink.NsFd(topo.client.h),
	})).To(gomega.Succeed())
	g.Expect(topo.node.nl.LinkAdd(&netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: "kxveth0"}, PeerName: "eth0", PeerNamespace: netlink.NsFd(topo.pod.h),
	})).To(gomega.Succeed())

	addAddrs(t, topo.node, "eth0", "203.0.113.2/24", "2001:db8:1::2/64")
	addAddrs(t, topo.node, "kxveth0", "192.0.2.1/24", "2001:db8:2::1/64")
	addAddrs(t, topo.client, "eth0", "203.0.113.1/24", "2001:db8:1::1/64")
	addAddrs(t, topo.client, "lo", "203.0.113.200/32")
	addAddrs(t, topo.pod, "eth0", "192.0.2.2/24", "192.0.2.3/24", "2001:db8:2::2/64")

	route(t, topo.node, &netlink.Route{Gw: net.ParseIP("203.0.113.1")})
	route(t, topo.node, &netlink.Route{Gw: net.ParseIP("2001:db8:1::1"), Family: unix.AF_INET6})
	route(t, topo.node, &netlink.Route{Dst: mustCIDR("203.0.113.192/26"), Type: unix.RTN_UNREACHABLE})
	route(t, topo.pod, &netlink.Route{Gw: net.ParseIP("192.0.2.1")})
	route(t, topo.pod, &netlink.Route{Gw: net.ParseIP("2001:db8:2::1"), Family: unix.AF_INET6})
	route(t, topo.client, &netlink.Route{Dst: mustCIDR("192.0.2.0/24"), Gw: net.ParseIP("203.0.113.2")})
	route(t, topo.client, &netlink.Route{Dst: mustCIDR("2001:db8:2::/64"), Gw: net.ParseIP("2001:db8:1::2")})

	up, err := topo.node.nl.LinkByName("eth0")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	topo.nodeMAC = up.Attrs().HardwareAddr
	topo.nodeUplink = up.Attrs().Index
	return topo
}

func mustCIDR(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

// newTestNS creates a named namespace with its loopback up. Leftovers of
// an earlier run that crashed are removed first.
func newTestNS(t testing.TB, name string) *testNS {
	t.Helper()
	if _, err := os.Stat(filepath.Join("/run/netns", name)); err == nil {
		if err := netns.DeleteNamed(name); err != nil {
			t.Fatalf("remove stale namespace %s: %v", name, err)
		}
	}
	errc := make(chan error, 1)
	go func() {
		// NewNamed switches the thread into the new namespace; the thread
		// stays locked and ends with this goroutine.
		runtime.LockOSThread()
		h, err := netns.NewNamed(name)
		if err == nil {
			err = h.Close()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	n := &testNS{name: name}
	t.Cleanup(func() {
		if n.nl != nil {
			n.nl.Close()
		}
		if n.h.IsOpen() {
			_ = n.h.Close()
		}
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete namespace %s: %v", name, err)
		}
	})
	var err error
	if n.h, err = netns.GetFromName(name); err != nil {
		t.Fatalf("open namespace %s: %v", name, err)
	}
	if n.nl, err = netlink.NewHandleAt(n.h, unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER); err != nil {
		t.Fatalf("netlink in %s: %v", name, err)
	}
	// No duplicate address detection on the links created next: their
	// link-local addresses would stay tentative for a second or two.
	sysctl(t, n, "net.ipv6.conf.default.accept_dad", "0")
	lo, err := n.nl.LinkByName("lo")
	if err == nil {
		err = n.nl.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("loopback up in %s: %v", name, err)
	}
	return n
}

// addr adds addresses (IPv6 without duplicate address detection) to a
// link and sets it up.
func addAddrs(t testing.TB, n *testNS, link string, cidrs ...string) {
	t.Helper()
	l, err := n.nl.LinkByName(link)
	if err != nil {
		t.Fatalf("%s: %v", n.name, err)
	}
	for _, c := range cidrs {
		a, err := netlink.ParseAddr(c)
		if err != nil {
			t.Fatal(err)
		}
		if a.IP.To4() == nil {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := n.nl.AddrAdd(l, a); err != nil {
			t.Fatalf("%s: add %s to %s: %v", n.name, c, link, err)
		}
	}
	if err := n.nl.LinkSetUp(l); err != nil {
		t.Fatalf("%s: %v", n.name, err)
	}
}

func route(t testing.TB, n *testNS, r *netlink.Route) {
	t.Helper()
	if err := n.nl.RouteAdd(r); err != nil {
		t.Fatalf("%s: add route %s: %v", n.name, r, err)
	}
}

// sysctl reads or (with a value) writes a sysctl in the namespace.
func sysctl(t testing.TB, n *testNS, name string, value ...string) string {
	t.Helper()
	p := "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
	var out string
	err := n.do(func() error {
		if len(value) > 0 {
			return os.WriteFile(p, []byte(value[0]), 0o644)
		}
		b, err := os.ReadFile(p)
		out = strings.TrimSpace(string(b))
		return err
	})
	if err != nil {
		t.Fatalf("%s: sysctl %s: %v", n.name, name, err)
	}
	return out
}

// serve accepts connections on addr in the namespace and writes back each
// peer's address and the local one; with hold, it keeps the connections open until the
// test ends. The listener closes with the test.
func serve(t *testing.T, n *testNS, addr netip.AddrPort, hold bool) {
	t.Helper()
	var l net.Listener
	err := n.do(func() error {
		var err error
		l, err = net.Listen("tcp", addr.String())
		return err
	})
	if err != nil {
		t.Fatalf("%s: listen on %s: %v", n.name, addr, err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = l.Close()
		<-done
	})
	go func() {
		defer close(done)
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		// Bounded: the listener closes when the test ends.
		for range 100 {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = fmt.Fprintf(c, "%s %s\n", c.RemoteAddr(), c.LocalAddr())
			if hold {
				held = append(held, c)
			} else {
				_ = c.Close()
			}
		}
	}()
}

// seen is what a server saw of a connection.
type seen struct {
	peer   netip.Addr // the connection's source
	server netip.Addr // the address the server accepted it on
}

// dial connects to addr from the namespace and returns what the server
// saw. The connection is closed unless keep is set.
func dial(n *testNS, addr netip.AddrPort, keep bool) (seen, net.Conn, error) {
	return dialFrom(n, netip.Addr{}, addr, keep)
}

// dialFrom is dial with a given source address (none: the kernel's choice).
func dialFrom(n *testNS, from netip.Addr, addr netip.AddrPort, keep bool) (seen, net.Conn, error) {
	var c net.Conn
	err := n.do(func() error {
		var err error
		d := net.Dialer{Timeout: 3 * time.Second}
		if from.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: from.AsSlice()}
		}
		c, err = d.DialContext(context.Background(), "tcp", addr.String())
		return err
	})
	if err != nil {
		return seen{}, nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 128)
	k, err := io.ReadAtLeast(c, buf, 1)
	var peer, server netip.AddrPort
	if err == nil {
		fields := strings.Fields(string(buf[:k]))
		if len(fields) != 2 {
			err = fmt.Errorf("unexpected answer %q", buf[:k])
		} else if peer, err = netip.ParseAddrPort(fields[0]); err == nil {
			server, err = netip.ParseAddrPort(fields[1])
		}
	}
	if err != nil || !keep {
		_ = c.Close()
		c = nil
	}
	return seen{peer: peer.Addr().Unmap(), server: server.Addr().Unmap()}, c, err
}

// neighbour returns the hardware address the namespace's eth0 has for ip,
// or nil.
func neighbour(n *testNS, ip netip.Addr) (net.HardwareAddr, error) {
	l, err := n.nl.LinkByName("eth0")
	if err != nil {
		return nil, err
	}
	fam := unix.AF_INET
	if ip.Is6() {
		fam = unix.AF_INET6
	}
	neighs, err := n.nl.NeighList(l.Attrs().Index, fam)
	if err != nil {
		return nil, err
	}
	for _, nb := range neighs {
		if a, ok := netip.AddrFromSlice(nb.IP); ok && a.Unmap() == ip && nb.State&(netlink.NUD_FAILED|netlink.NUD_INCOMPLETE) == 0 {
			return nb.HardwareAddr, nil
		}
	}
	return nil, nil
}

// settledSnapshot is the namespace's snapshot once the kernel has finished
// what it does by itself after links come up (IPv6 link-local addresses
// leaving the tentative state, their routes, the anycast routes forwarding
// brings): the same twice in a row 200 ms apart, with no tentative address,
// within 10 s.
func settledSnapshot(t *testing.T, n *testNS) string {
	t.Helper()
	last := snapshot(t, n)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		cur := snapshot(t, n)
		if cur == last && !hasTentative(t, n) {
			return cur
		}
		last = cur
	}
	t.Fatalf("the kernel state of %s did not settle within 10s:\n%s", n.name, last)
	return ""
}

func hasTentative(t *testing.T, n *testNS) bool {
	t.Helper()
	addrs, err := n.nl.AddrList(nil, netlink.FAMILY_V6)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if a.Flags&unix.IFA_F_TENTATIVE != 0 {
			return true
		}
	}
	return false
}

// snapshot renders the kernel state netconf could touch in a namespace:
// addresses (with their protocol), rules, routes of every table, and every
// nftables table with rule handles and map contents. Equal snapshots mean
// nothing was rewritten.
func snapshot(t *testing.T, n *testNS) string {
	t.Helper()
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }

	d, err := New(Options{NetNSPath: n.path()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	links, err := d.links()
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := d.listAddresses(links)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		add("addr %s/%d dev %s label %q proto %d", a.IP, a.PrefixLen, a.linkName, a.Label, a.Proto)
	}
	libAddrs, err := n.nl.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range libAddrs {
		add("addr %s dev %d flags %#x scope %d lft %d/%d", a.IPNet, a.LinkIndex, a.Flags, a.Scope, a.PreferedLft, a.ValidLft)
	}
	rules, err := n.nl.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		add("rule %s proto %d", r, r.Protocol)
	}
	routes, err := n.nl.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		add("route %s type %d proto %d metric %d", r, r.Type, r.Protocol, r.Priority)
	}

	c, err := nftables.New(nftables.WithNetNSFd(int(n.h)))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	chains, err := c.ListChains()
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		add("nft table %d %s", tb.Family, tb.Name)
		sets, err := c.GetSets(tb)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sets {
			elems, err := c.GetSetElements(s)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range elems {
				add("nft %s set %s elem %x : %x", tb.Name, s.Name, e.Key, e.Val)
			}
			add("nft %s set %s (%d elements)", tb.Name, s.Name, len(elems))
		}
		for _, ch := range chains {
			if ch.Table.Name != tb.Name || ch.Table.Family != tb.Family {
				continue
			}
			add("nft %s chain %s", tb.Name, ch.Name)
			rs, err := c.GetRules(tb, ch)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				add("nft %s chain %s rule %d %q %s", tb.Name, ch.Name, r.Handle, r.UserData, renderExprs(r.Exprs))
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func renderExprs(es []expr.Any) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "[%T %+v]", e, e)
	}
	return b.String()
}

// watchWrites records the route, address and nftables changes made in n
// until the returned function is called, which returns them.
func watchWrites(t *testing.T, n *testNS) func() []string {
	t.Helper()
	done := make(chan struct{})
	routes := make(chan netlink.RouteUpdate, 256)
	addrs := make(chan netlink.AddrUpdate, 256)
	ns := n.h
	if err := netlink.RouteSubscribeWithOptions(routes, done, netlink.RouteSubscribeOptions{Namespace: &ns}); err != nil {
		t.Fatal(err)
	}
	if err := netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{Namespace: &ns}); err != nil {
		t.Fatal(err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(n.h)), nftables.AsLasting())
	if err != nil {
		t.Fatal(err)
	}
	mon := nftables.NewMonitor()
	nft, err := c.AddMonitor(mon)
	if err != nil {
		t.Fatal(err)
	}
	return func() []string {
		var events []string
		// Events are queued before the writes return; collect until quiet.
		quiet := time.NewTimer(300 * time.Millisecond)
		defer quiet.Stop()
	collect:
		for range 10000 {
			select {
			case u := <-routes:
				events = append(events, fmt.Sprintf("route %d %s", u.Type, u.Route))
			case u := <-addrs:
				events = append(events, fmt.Sprintf("addr new=%t %s", u.NewAddr, &u.LinkAddress))
			case e, ok := <-nft:
				if !ok {
					break collect
				}
				events = append(events, fmt.Sprintf("nft %d %T", e.Type, e.Data))
			case <-quiet.C:
				break collect
			}
		}
		close(done)
		_ = mon.Close()
		_ = c.CloseLasting()
		return events
	}
}

// readRootSysctl reads a sysctl of the test's own namespace.
func readRootSysctl(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}

func nativeUint32(v uint32) []byte { return binaryutil.NativeEndian.PutUint32(v) }

// conntrackAvailable says why conntrack cannot be listed in n, if it cannot.
func conntrackAvailable(n *testNS) error {
	if _, err := n.nl.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET); err != nil {
		return errors.Join(errors.New("conntrack unavailable (nf_conntrack and nf_conntrack_netlink needed)"), err)
	}
	return nil
}
