package staticip

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/google/nftables"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kubext/kubext/test/lab/labnet"
)

// A split is a static IP answered for by two nodes at once: a partner's
// connections and replies then go to either, at random. The detector
// watches for one in two independent ways, every SampleInterval:
//
//   - configured: the address is on an interface of more than one node
//     namespace whose uplink is up (a node cut off the bridge cannot answer,
//     so it does not count until it is back on it), and kubext's hold gate
//     there does not silence it (owned but no longer held: see
//     internal/netconf/gate.go; the sending check below shows the gate
//     does silence it);
//   - sending: more than one node sends as the address within one sample
//     interval of each other, by the kernel's receive timestamps of the
//     frames as seen on the wire from the client namespace (the partner's
//     place; the timestamps keep a capture that reads late, on a loaded
//     machine, from putting frames sent far apart into one sample):
//     every sample the detector broadcasts an ARP request for the address
//     and records the source MAC of every ARP reply for it, of every
//     gratuitous ARP and of every IPv4 frame whose source is the address.
//     Every node whose kernel holds the address replies to the request, so
//     two holders show up in the same sample even when no traffic flows;
//     and a node that has lost the address but still translates a pod's
//     traffic to it (a stale SNAT entry) shows up as a second sender next
//     to the holder's reply.
//
// The capture is a raw packet socket on the client's eth0 rather than
// conntrack or neighbour state: those show what the client decided, one
// MAC per address, and so cannot show two nodes answering at once.
// IPv4 only: the lab's static IPs are IPv4.

// SampleInterval is how often the detector samples.
const SampleInterval = 10 * time.Millisecond

// maxEpisodes bounds the memory a detector uses: after that many splits it
// only counts them.
const maxEpisodes = 64

// maxRun bounds a detector's life should its owner never stop it.
const maxRun = 15 * time.Minute

// Split is one episode of consecutive samples in which the same nodes
// answered for the address at once.
type Split struct {
	// Kind is "configured" or "sending".
	Kind string
	// Nodes are the nodes (or unknown MACs) that answered at once.
	Nodes []string
	// From and To are the first and last sample that saw it.
	From, To time.Time
	// Samples is how many samples saw it.
	Samples int
}

func (s Split) String() string {
	return fmt.Sprintf("%s on %s from %s to %s (%d samples)", s.Kind, strings.Join(s.Nodes, "+"),
		s.From.UTC().Format("15:04:05.000"), s.To.UTC().Format("15:04:05.000"), s.Samples)
}

// SplitDetector watches one address; see [WatchSplits].
type SplitDetector struct {
	addr    netip.Addr
	nodes   []nodeProbe
	macs    map[string]string // node eth0 MAC -> node name
	client  *packet.Conn
	raw     syscall.RawConn
	probe   []byte
	stop    chan struct{}
	done    sync.WaitGroup
	stopped sync.Once

	mu sync.Mutex
	// frames are the senders' frames of about the last second, by the
	// kernel's receive time; fresh are those not yet compared.
	frames, fresh []sentFrame
	// maxLag is the longest a frame waited between the kernel and the
	// capture's read: what judging by read time could have mixed up.
	maxLag   time.Duration
	splits   []Split
	dropped  int
	samples  int
	sent     map[string]int // frames sent as the address, by node
	kinds    map[string]int // the same by node and frame kind
	lastKind map[string]string
	errs     []error
	lastSeen map[string]time.Time
}

// sentFrame is one frame sent as the address: who sent it and when the
// client's kernel received it.
type sentFrame struct {
	sender string
	at     time.Time
}

type nodeProbe struct {
	name   string
	handle *netlink.Handle
	nft    *nftables.Conn
}

// gated reports whether kubext's hold gate on the node silences addr: the
// address is owned but not held (an expired element is not listed).
func (n nodeProbe) gated(addr netip.Addr) bool {
	table := &nftables.Table{Name: "kubext", Family: nftables.TableFamilyINet}
	has := func(set string) bool {
		s, err := n.nft.GetSetByName(table, set)
		if err != nil {
			return false
		}
		elems, err := n.nft.GetSetElements(s)
		return err == nil && slices.ContainsFunc(elems, func(e nftables.SetElement) bool { return bytes.Equal(e.Key, addr.AsSlice()) })
	}
	return has("owned4") && !has("held4")
}

// NewSplitDetector starts watching addr on the lab network's nodes. Stop it
// to read the result; it stops by itself after 15 minutes.
func NewSplitDetector(n *labnet.Network, addr netip.Addr) (*SplitDetector, error) {
	if !addr.Is4() {
		return nil, fmt.Errorf("split detector: %s: only IPv4 addresses are watched", addr)
	}
	d := &SplitDetector{addr: addr, macs: map[string]string{}, stop: make(chan struct{}),
		sent: map[string]int{}, kinds: map[string]int{},
		lastSeen: map[string]time.Time{}, lastKind: map[string]string{}}
	ok := false
	defer func() {
		if !ok {
			d.close()
		}
	}()
	for _, m := range n.Nodes {
		ns, err := netns.GetFromName(m.Namespace)
		if err != nil {
			return nil, fmt.Errorf("split detector: %s: %w", m.Namespace, err)
		}
		h, err := netlink.NewHandleAt(ns)
		if err != nil {
			ns.Close()
			return nil, fmt.Errorf("split detector: %s: %w", m.Namespace, err)
		}
		nft, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(int(ns)))
		ns.Close()
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("split detector: %s: %w", m.Namespace, err)
		}
		d.nodes = append(d.nodes, nodeProbe{name: m.Name, handle: h, nft: nft})
		eth0, err := h.LinkByName("eth0")
		if err != nil {
			return nil, fmt.Errorf("split detector: %s: %w", m.Namespace, err)
		}
		d.macs[eth0.Attrs().HardwareAddr.String()] = m.Name
	}
	var clientMAC net.HardwareAddr
	err := labnet.Do(n.ClientNamespace(), func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		clientMAC = ifi.HardwareAddr
		if d.client, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, nil); err != nil {
			return err
		}
		if d.raw, err = d.client.SyscallConn(); err != nil {
			return err
		}
		var serr error
		if err := d.raw.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
		}); err != nil {
			return err
		}
		return serr
	})
	if err != nil {
		return nil, fmt.Errorf("split detector: capture in %s: %w", n.ClientNamespace(), err)
	}
	d.probe = arpRequest(clientMAC, n.ClientAddr(), addr)
	d.done.Add(2)
	go d.capture(clientMAC)
	go d.sample()
	ok = true
	return d, nil
}

// arpRequest is a broadcast "who has target? tell sender" frame.
func arpRequest(mac net.HardwareAddr, sender, target netip.Addr) []byte {
	f := make([]byte, 42)
	copy(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:12], mac)
	binary.BigEndian.PutUint16(f[12:], unix.ETH_P_ARP)
	binary.BigEndian.PutUint16(f[14:], 1) // Ethernet
	binary.BigEndian.PutUint16(f[16:], unix.ETH_P_IP)
	f[18], f[19] = 6, 4
	binary.BigEndian.PutUint16(f[20:], 1) // request
	copy(f[22:28], mac)
	s, t := sender.As4(), target.As4()
	copy(f[28:32], s[:])
	copy(f[38:42], t[:])
	return f
}

// capture records who sends as the address.
func (d *SplitDetector) capture(own net.HardwareAddr) {
	defer d.done.Done()
	buf, oob := make([]byte, 2048), make([]byte, 128)
	want := d.addr.As4()
	for {
		select {
		case <-d.stop:
			return
		default:
		}
		_ = d.client.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, at, err := d.read(buf, oob)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			d.fail(fmt.Errorf("split detector: capture: %w", err))
			return
		}
		f := buf[:n]
		if n < 14 || string(f[6:12]) == string(own) {
			continue
		}
		var src []byte
		kind := ""
		switch binary.BigEndian.Uint16(f[12:14]) {
		case unix.ETH_P_ARP:
			// Sender protocol address: replies and gratuitous ARP.
			if n >= 42 && binary.BigEndian.Uint16(f[16:18]) == unix.ETH_P_IP {
				src = f[28:32]
				kind = "arp-reply"
				if binary.BigEndian.Uint16(f[20:22]) == 1 || [4]byte(f[38:42]) == want {
					kind = "arp-announce"
				}
			}
		case unix.ETH_P_IP:
			if n >= 34 {
				src = f[26:30]
				kind = "ipv4"
			}
		}
		if src == nil || [4]byte(src) != want {
			continue
		}
		sender := net.HardwareAddr(f[6:12]).String()
		if node, ok := d.macs[sender]; ok {
			sender = node
		}
		d.mu.Lock()
		if lag := time.Since(at); lag > d.maxLag {
			d.maxLag = lag
		}
		d.fresh = append(d.fresh, sentFrame{sender: sender, at: at})
		d.sent[sender]++
		d.kinds[sender+" "+kind]++
		d.lastSeen[sender] = at
		d.lastKind[sender] = kind
		d.mu.Unlock()
	}
}

// read reads one frame and the time the kernel received it (the read's
// own time if the kernel gave none).
func (d *SplitDetector) read(buf, oob []byte) (int, time.Time, error) {
	var n, oobn int
	var rerr error
	err := d.raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, 0)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return 0, time.Time{}, err
	}
	at := time.Now()
	msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
	if perr != nil {
		return n, at, nil
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
			ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			at = time.Unix(ts.Unix())
		}
	}
	return n, at, nil
}

// compare finds the frames of different senders received less than
// SampleInterval apart, among those captured since the last call and
// the second before them, and records each pair as a sending split.
func (d *SplitDetector) compare(now time.Time) {
	d.mu.Lock()
	fresh := d.fresh
	d.fresh = nil
	var pairs [][2]sentFrame
	for _, f := range fresh {
		for _, g := range d.frames {
			if g.sender != f.sender && f.at.Sub(g.at).Abs() < SampleInterval {
				pairs = append(pairs, [2]sentFrame{g, f})
				break
			}
		}
		d.frames = append(d.frames, f)
	}
	d.frames = slices.DeleteFunc(d.frames, func(f sentFrame) bool { return now.Sub(f.at) > time.Second })
	d.mu.Unlock()
	for _, p := range pairs {
		d.record("sending", []string{p[0].sender, p[1].sender}, later(p[0].at, p[1].at))
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sample closes a sample every SampleInterval: it judges the senders seen
// during it, lists the address on every node and sends the next probe.
func (d *SplitDetector) sample() {
	defer d.done.Done()
	tick := time.NewTicker(SampleInterval)
	defer tick.Stop()
	deadline := time.After(maxRun)
	for {
		select {
		case <-d.stop:
			return
		case <-deadline:
			d.fail(fmt.Errorf("split detector: still running after %s; stopped", maxRun))
			return
		case now := <-tick.C:
			d.mu.Lock()
			d.samples++
			d.mu.Unlock()
			d.compare(now)
			d.record("configured", d.configured(), now)
			if _, err := d.client.WriteTo(d.probe, &packet.Addr{HardwareAddr: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}); err != nil {
				d.fail(fmt.Errorf("split detector: probe: %w", err))
			}
		}
	}
}

// configured lists the nodes that have the address on an interface and
// are on the bridge. Any interface counts, not only the uplink: the kernel
// answers ARP on eth0 for an address on any of its interfaces. An address
// past its valid lifetime counts until the kernel removes it (up to a
// quarter of a second later): until then the kernel still answers for it.
func (d *SplitDetector) configured() []string {
	var on []string
	for _, n := range d.nodes {
		addrs, err := n.handle.AddrList(nil, netlink.FAMILY_V4)
		if err != nil {
			continue // the namespace is being torn down
		}
		has := slices.ContainsFunc(addrs, func(a netlink.Addr) bool { return a.IP.Equal(d.addr.AsSlice()) })
		if !has {
			continue
		}
		if eth0, err := n.handle.LinkByName("eth0"); err == nil && eth0.Attrs().OperState == netlink.OperUp {
			on = append(on, n.name)
		}
	}
	if len(on) < 2 {
		return on
	}
	return slices.DeleteFunc(on, func(name string) bool {
		i := slices.IndexFunc(d.nodes, func(n nodeProbe) bool { return n.name == name })
		return d.nodes[i].gated(d.addr)
	})
}

// record extends the current episode of this kind or starts one when
// more than one node answered.
func (d *SplitDetector) record(kind string, nodes []string, at time.Time) {
	if len(nodes) < 2 {
		return
	}
	slices.Sort(nodes)
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := len(d.splits) - 1; i >= 0; i-- {
		s := &d.splits[i]
		if s.Kind != kind {
			continue
		}
		if slices.Equal(s.Nodes, nodes) && at.Sub(s.To) <= 3*SampleInterval {
			s.To = at
			s.Samples++
			return
		}
		break
	}
	if len(d.splits) >= maxEpisodes {
		d.dropped++
		return
	}
	d.splits = append(d.splits, Split{Kind: kind, Nodes: nodes, From: at, To: at, Samples: 1})
}

func (d *SplitDetector) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.errs = append(d.errs, err)
}

// Stop ends the watch (it may be called more than once) and returns the
// splits seen, and an error if the detector could not watch all along.
func (d *SplitDetector) Stop() ([]Split, error) {
	d.stopped.Do(func() {
		close(d.stop)
		d.done.Wait()
		d.close()
	})
	return d.Splits(), d.Err()
}

func (d *SplitDetector) close() {
	for _, n := range d.nodes {
		n.handle.Close()
		_ = n.nft.CloseLasting()
	}
	if d.client != nil {
		d.client.Close()
	}
}

// Splits are the splits seen so far, oldest first.
func (d *SplitDetector) Splits() []Split {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.splits)
}

// Err reports what kept the detector from watching, if anything.
func (d *SplitDetector) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return errors.Join(d.errs...)
}

// SplitTime is how long more than one node answered for the address, in
// either way, over the watch so far: the union of the episodes, each
// sample counting for the interval it closes (a one-sample split counts
// SampleInterval). Episodes past the first 64 are counted as one sample
// each, so the figure is a lower bound once Report says "and N more".
func (d *SplitDetector) SplitTime() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return splitTime(d.splits) + time.Duration(d.dropped)*SampleInterval
}

// splitTime is the length of the union of the episodes' intervals: a
// "configured" and a "sending" episode of the same moment count once.
func splitTime(splits []Split) time.Duration {
	type span struct{ from, to time.Time }
	spans := make([]span, 0, len(splits))
	for _, s := range splits {
		spans = append(spans, span{s.From.Add(-SampleInterval), s.To})
	}
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	var total time.Duration
	var cur span
	for i, s := range spans {
		switch {
		case i == 0:
			cur = s
		case !s.from.After(cur.to):
			if s.to.After(cur.to) {
				cur.to = s.to
			}
		default:
			total += cur.to.Sub(cur.from)
			cur = s
		}
	}
	if len(spans) > 0 {
		total += cur.to.Sub(cur.from)
	}
	return total
}

// Episodes is how many splits the detector saw, those past the first 64
// (which Splits does not list) included.
func (d *SplitDetector) Episodes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.splits) + d.dropped
}

// Senders counts the frames each node (or unknown MAC) sent as the address
// so far: ARP replies, gratuitous ARP and IPv4.
func (d *SplitDetector) Senders() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int, len(d.sent))
	for k, v := range d.sent {
		out[k] = v
	}
	return out
}

// LastSent is when the node last sent as the address (zero if never) and
// what: arp-reply, arp-announce (gratuitous ARP) or ipv4.
func (d *SplitDetector) LastSent(node string) (time.Time, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastSeen[node], d.lastKind[node]
}

// Samples is how many samples the detector has taken.
func (d *SplitDetector) Samples() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.samples
}

// Report is a summary of the watch for a test log.
func (d *SplitDetector) Report() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "split detector for %s: %d samples, frames sent as it by node %v (by kind %v), capture lag up to %s, %d splits",
		d.addr, d.samples, d.sent, d.kinds, d.maxLag.Round(time.Millisecond), len(d.splits)+d.dropped)
	for _, s := range d.splits {
		fmt.Fprintf(&b, "\n  %s", s)
	}
	if d.dropped > 0 {
		fmt.Fprintf(&b, "\n  ... and %d more", d.dropped)
	}
	return b.String()
}

// TB is the part of testing.TB that WatchSplits needs.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// WatchSplits watches addr for the rest of the test and fails the test,
// when it ends, if two nodes ever answered for the address at once.
func WatchSplits(t TB, n *labnet.Network, addr netip.Addr) *SplitDetector {
	t.Helper()
	d, err := NewSplitDetector(n, addr)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		splits, err := d.Stop()
		t.Logf("%s", d.Report())
		if err != nil {
			t.Errorf("%v", err)
		}
		if len(splits) > 0 {
			t.Errorf("split: %s was answered for by more than one node:\n%s", addr, d.Report())
		}
	})
	return d
}
