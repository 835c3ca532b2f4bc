package witnessguard

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/kubext/kubext/internal/witness"
)

// The tests run in network namespaces of their own, unnamed (they go
// away with the test's last socket), where every address is on the
// loopback interface: datagrams between them pass the input hook as they
// would arriving from the node network, and nothing leaves the machine.
// The addresses are documentation ranges: 192.0.2.0/24 stands for the node
// network, 198.51.100.0/24 for a pod or the Internet.

const testPort = 7946

// testNS is a fresh network namespace with lo up and addrs on it.
type testNS struct {
	handle netns.NsHandle
}

func newNS(t *testing.T, addrs ...string) *testNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and nftables tables")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Set(orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		p := netip.MustParsePrefix(a)
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if p.Addr().Is6() {
			addr.Flags = 0x02 // IFA_F_NODAD: usable at once
		}
		if err := h.AddrAdd(lo, addr); err != nil {
			t.Fatalf("adding %s: %v", a, err)
		}
	}
	if err := h.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	return &testNS{handle: ns}
}

func (n *testNS) fd() int { return int(n.handle) }

// listen opens a UDP socket in the namespace.
func (n *testNS) listen(t *testing.T, addr string) net.PacketConn {
	t.Helper()
	var c net.PacketConn
	err := n.do(func() (err error) { c, err = net.ListenPacket("udp", addr); return err })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (n *testNS) do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	if err := netns.Set(n.handle); err != nil {
		return err
	}
	defer func() { _ = netns.Set(orig) }()
	return fn()
}

// receiver counts what arrives on a socket, by source address.
type receiver struct {
	counts map[netip.Addr]*atomic.Int64
}

func receive(c net.PacketConn, from ...string) *receiver {
	r := &receiver{counts: map[netip.Addr]*atomic.Int64{}}
	for _, f := range from {
		r.counts[netip.MustParseAddr(f)] = &atomic.Int64{}
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			_, a, err := c.ReadFrom(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			if n, ok := r.counts[a.(*net.UDPAddr).AddrPort().Addr().Unmap()]; ok {
				n.Add(1)
			}
		}
	}()
	return r
}

func (r *receiver) from(a string) int64 { return r.counts[netip.MustParseAddr(a)].Load() }

// send sends n datagrams from src to dst, every gap (0: as fast as it
// can), and returns how many the kernel took.
func (n *testNS) send(t *testing.T, src, dst string, count int, gap time.Duration) int {
	t.Helper()
	c := n.listen(t, net.JoinHostPort(src, "0"))
	to := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(dst))
	sent := 0
	for range count {
		if _, err := c.WriteTo([]byte("not a witness message"), to); err == nil {
			sent++
		}
		if gap > 0 {
			time.Sleep(gap)
		}
	}
	return sent
}

// eventually waits up to a second for cond.
func eventually(cond func() bool) bool {
	for range 100 {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}

func TestOnlyTheNodeNetworkReachesThePort(t *testing.T) {
	ns := newNS(t, "192.0.2.1/32", "192.0.2.2/32", "198.51.100.1/32", "2001:db8::1/128", "2001:db8:1::1/128")
	if err := Install(Config{Port: testPort, PerSource: 1000,
		AllowFrom: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::/48")}}, ns.fd()); err != nil {
		t.Fatal(err)
	}
	r := receive(ns.listen(t, ":7946"), "192.0.2.2", "198.51.100.1", "2001:db8::1", "2001:db8:1::1")
	other := receive(ns.listen(t, "192.0.2.1:7947"), "198.51.100.1")

	ns.send(t, "192.0.2.2", "192.0.2.1:7946", 10, time.Millisecond)
	ns.send(t, "198.51.100.1", "192.0.2.1:7946", 10, time.Millisecond)
	ns.send(t, "2001:db8::1", "[2001:db8::1]:7946", 10, time.Millisecond)
	ns.send(t, "2001:db8:1::1", "[2001:db8::1]:7946", 10, time.Millisecond)
	ns.send(t, "198.51.100.1", "192.0.2.1:7947", 10, time.Millisecond)

	if !eventually(func() bool {
		return r.from("192.0.2.2") == 10 && r.from("2001:db8::1") == 10 && other.from("198.51.100.1") == 10
	}) {
		t.Fatalf("the node network's datagrams did not all arrive: %d of 10 (IPv4), %d of 10 (IPv6), other port %d of 10",
			r.from("192.0.2.2"), r.from("2001:db8::1"), other.from("198.51.100.1"))
	}
	if got := r.from("198.51.100.1") + r.from("2001:db8:1::1"); got != 0 {
		t.Errorf("%d datagrams from outside the node network reached the witness port", got)
	}
	outside, _, err := Dropped(ns.fd())
	if err != nil {
		t.Fatal(err)
	}
	if outside != 20 {
		t.Errorf("the guard counted %d datagrams dropped from outside, want 20", outside)
	}
	want := `
# HELP kubext_witness_guard_dropped_total Datagrams to the witness port the kernel dropped: from outside --witness-allow-from (reason outside), or beyond a source's rate (reason rate).
# TYPE kubext_witness_guard_dropped_total counter
kubext_witness_guard_dropped_total{reason="outside"} 20
kubext_witness_guard_dropped_total{reason="rate"} 0
`
	if err := testutil.CollectAndCompare(Collector(ns.fd()), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// An allowlist of IPv4 networks refuses IPv6 whole: the socket listens
// on both families.
func TestAFamilyTheAllowlistOmitsIsRefused(t *testing.T) {
	ns := newNS(t, "192.0.2.1/32", "2001:db8::1/128")
	if err := Install(Config{Port: testPort, PerSource: 1000, AllowFrom: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}, ns.fd()); err != nil {
		t.Fatal(err)
	}
	r := receive(ns.listen(t, ":7946"), "192.0.2.1", "2001:db8::1")
	ns.send(t, "2001:db8::1", "[2001:db8::1]:7946", 5, time.Millisecond)
	ns.send(t, "192.0.2.1", "192.0.2.1:7946", 5, time.Millisecond)
	if !eventually(func() bool { return r.from("192.0.2.1") == 5 }) {
		t.Fatalf("%d of 5 IPv4 datagrams arrived", r.from("192.0.2.1"))
	}
	if got := r.from("2001:db8::1"); got != 0 {
		t.Errorf("%d IPv6 datagrams reached the port, with only an IPv4 network allowed", got)
	}
}

func TestOneSourceCannotCrowdOutTheOthers(t *testing.T) {
	ns := newNS(t, "192.0.2.1/32", "192.0.2.2/32", "192.0.2.3/32")
	const rate = 200
	if err := Install(Config{Port: testPort, PerSource: rate}, ns.fd()); err != nil {
		t.Fatal(err)
	}
	r := receive(ns.listen(t, "192.0.2.1:7946"), "192.0.2.2", "192.0.2.3")

	start := time.Now()
	flooded := make(chan int)
	go func() { flooded <- ns.send(t, "192.0.2.3", "192.0.2.1:7946", 50000, 0) }()
	// A peer's pace, well under the rate, during the flood.
	peer := ns.send(t, "192.0.2.2", "192.0.2.1:7946", 40, 10*time.Millisecond)
	sent := <-flooded
	elapsed := time.Since(start)

	if !eventually(func() bool { return r.from("192.0.2.2") == int64(peer) }) {
		t.Errorf("the peer's datagrams were dropped during another source's flood: %d of %d arrived", r.from("192.0.2.2"), peer)
	}
	// The burst, then the rate for as long as the flood lasted, and some
	// slack for the kernel's token accounting.
	limit := int64(rate + rate*elapsed.Seconds()*1.5 + 50)
	if got := r.from("192.0.2.3"); got > limit {
		t.Errorf("%d of the flood's %d datagrams in %s reached the socket, want at most %d", got, sent, elapsed, limit)
	}
	_, over, err := Dropped(ns.fd())
	if err != nil {
		t.Fatal(err)
	}
	if over == 0 {
		t.Errorf("the guard counted no datagram over a source's rate after %d sent in %s", sent, elapsed)
	}
}

func TestInstallReplacesAndRemoveRemoves(t *testing.T) {
	ns := newNS(t, "192.0.2.1/32", "198.51.100.1/32")
	allow := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	if err := Install(Config{Port: 7000, PerSource: 100, AllowFrom: allow}, ns.fd()); err != nil {
		t.Fatal(err)
	}
	// Installed again, on another port: the first port is open again.
	if err := Install(Config{Port: testPort, PerSource: 100, AllowFrom: allow}, ns.fd()); err != nil {
		t.Fatal(err)
	}
	r := receive(ns.listen(t, "192.0.2.1:7000"), "198.51.100.1")
	ns.send(t, "198.51.100.1", "192.0.2.1:7000", 5, time.Millisecond)
	if !eventually(func() bool { return r.from("198.51.100.1") == 5 }) {
		t.Errorf("the port of the replaced table still drops: %d of 5 arrived", r.from("198.51.100.1"))
	}
	r = receive(ns.listen(t, "192.0.2.1:7946"), "198.51.100.1")
	ns.send(t, "198.51.100.1", "192.0.2.1:7946", 5, time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	if got := r.from("198.51.100.1"); got != 0 {
		t.Errorf("the new port let %d datagrams from outside through", got)
	}

	for range 2 { // removing twice is no error
		if err := Remove(ns.fd()); err != nil {
			t.Fatal(err)
		}
	}
	ns.send(t, "198.51.100.1", "192.0.2.1:7946", 5, time.Millisecond)
	if !eventually(func() bool { return r.from("198.51.100.1") == 5 }) {
		t.Errorf("the port still drops after Remove: %d of 5 arrived", r.from("198.51.100.1"))
	}
	if _, _, err := Dropped(ns.fd()); err == nil {
		t.Error("Dropped read a table Remove removed")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{PerSource: 100},
		{Port: testPort},
		{Port: testPort, PerSource: 100, AllowFrom: []netip.Prefix{netip.MustParsePrefix("192.0.2.1/24")}},
		{Port: testPort, PerSource: 100, AllowFrom: []netip.Prefix{{}}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := (Config{Port: testPort, PerSource: 100, AllowFrom: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestIntervals(t *testing.T) {
	got := intervals([]netip.Prefix{
		netip.MustParsePrefix("198.51.100.128/25"),
		netip.MustParsePrefix("192.0.2.0/24"),
		netip.MustParsePrefix("192.0.2.64/26"), // inside the /24: merged
		netip.MustParsePrefix("203.0.113.7/32"),
		netip.MustParsePrefix("255.255.255.0/24"), // ends the space: no end element
	})
	want := []struct {
		key string
		end bool
	}{{"192.0.2.0", false}, {"192.0.3.0", true}, {"198.51.100.128", false}, {"198.51.101.0", true},
		{"203.0.113.7", false}, {"203.0.113.8", true}, {"255.255.255.0", false}}
	if len(got) != len(want) {
		t.Fatalf("got %d elements, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		a, _ := netip.AddrFromSlice(got[i].Key)
		if a.String() != w.key || got[i].IntervalEnd != w.end {
			t.Errorf("element %d: %s end=%v, want %s end=%v", i, a, got[i].IntervalEnd, w.key, w.end)
		}
	}
}

func TestPerSourceRateFollowsTheTiming(t *testing.T) {
	d := witness.DefaultTiming()
	if got := PerSourceRate(d); got != 2000 { // 2 datagrams every 50 ms, fifty times over
		t.Errorf("default timing: %d a second, want 2000", got)
	}
	slow := d
	slow.ProbeInterval = time.Second
	if got := PerSourceRate(slow); got != 250 {
		t.Errorf("a probe a second: %d, want the floor of 250", got)
	}
}
