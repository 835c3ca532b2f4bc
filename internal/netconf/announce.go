package netconf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netns"
	"golang.org/x/net/bpf"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// Announcements tell the segment that an address now lives at this node's
// MAC address, so neighbours and switches stop sending to the old holder
// without waiting for their caches to expire. The first goes out before
// Apply returns; the rest follow on Options.Announcements in the
// background, in case a frame is lost or a switch port is still coming up.

// sender sends the announcements of one address on one uplink.
type sender interface {
	send() error
	Close() error
}

// openSender opens the socket for announcing addr on link. Sockets belong
// to the namespace they are created in, so it is opened there.
func openSender(ns netns.NsHandle, addr netip.Addr, link linkInfo) (sender, error) {
	if len(link.HardwareAddr) != 6 {
		return nil, fmt.Errorf("interface %s has no Ethernet address to announce", link.Name)
	}
	var s sender
	err := inNetNS(ns, func() error {
		var err error
		if addr.Is4() {
			s, err = openGARP(addr, link)
		} else {
			s, err = openNA(addr, link)
		}
		return err
	})
	return s, err
}

// garpSender broadcasts gratuitous ARP.
type garpSender struct {
	conn   *packet.Conn
	frames [][]byte
}

func openGARP(addr netip.Addr, link linkInfo) (*garpSender, error) {
	frames, err := garpFrames(link.HardwareAddr, addr)
	if err != nil {
		return nil, err
	}
	// The socket only sends: a filter that accepts nothing keeps the ARP
	// traffic of the segment out of its queue.
	drop, err := bpf.Assemble([]bpf.Instruction{bpf.RetConstant{Val: 0}})
	if err != nil {
		return nil, err
	}
	ifi := &net.Interface{Index: link.Index, Name: link.Name, HardwareAddr: link.HardwareAddr}
	conn, err := packet.Listen(ifi, packet.Raw, unix.ETH_P_ARP, &packet.Config{Filter: drop})
	if err != nil {
		return nil, fmt.Errorf("open packet socket on %s: %w", link.Name, err)
	}
	return &garpSender{conn: conn, frames: frames}, nil
}

// sendBackoff paces the retries of a frame the device would not queue
// (ENOBUFS): a link that has just come up has no real qdisc until the
// kernel's link-watch work attaches one, up to a second later, and a busy
// device's queue can be full for a moment. About 150 ms in all: an
// announcement that cannot go out by then is reported, and the agent's
// next pass tries again.
var sendBackoff = wait.Backoff{Steps: 5, Duration: 10 * time.Millisecond, Factor: 2}

func (s *garpSender) send() error {
	for _, f := range s.frames {
		err := retry.OnError(sendBackoff, func(err error) bool { return errors.Is(err, unix.ENOBUFS) }, func() error {
			_, err := s.conn.WriteTo(f, &packet.Addr{HardwareAddr: ethernet.Broadcast})
			return err
		})
		if err != nil {
			return fmt.Errorf("send gratuitous ARP: %w", err)
		}
	}
	return nil
}

func (s *garpSender) Close() error { return s.conn.Close() }

// garpFrames returns a gratuitous ARP request and a gratuitous ARP reply
// saying that ip is at hw, both broadcast, with ip as sender and target
// address. The request is what RFC 5227 calls an ARP announcement; some
// devices only heed replies (which Linux takes as gratuitous only when the
// target hardware address is the sender's), so both are sent.
//
// mdlayher/arp and mdlayher/ethernet rather than gopacket's layers: that
// package's init fills two 2.5 MiB tables the garbage collector then scans
// on every cycle, 5.7 MiB of resident memory in an agent that runs on
// every node and sends two frames per move.
func garpFrames(hw net.HardwareAddr, ip netip.Addr) ([][]byte, error) {
	if !ip.Is4() || len(hw) != 6 {
		return nil, fmt.Errorf("gratuitous ARP needs an IPv4 address and an Ethernet address, got %s and %s", ip, hw)
	}
	var frames [][]byte
	for _, op := range []arp.Operation{arp.OperationRequest, arp.OperationReply} {
		target := net.HardwareAddr{0, 0, 0, 0, 0, 0}
		if op == arp.OperationReply {
			target = hw
		}
		p, err := arp.NewPacket(op, hw, ip, target, ip)
		if err != nil {
			return nil, err
		}
		payload, err := p.MarshalBinary()
		if err != nil {
			return nil, err
		}
		f := &ethernet.Frame{Destination: ethernet.Broadcast, Source: hw, EtherType: ethernet.EtherTypeARP, Payload: payload}
		b, err := f.MarshalBinary()
		if err != nil {
			return nil, err
		}
		frames = append(frames, b)
	}
	return frames, nil
}

// naSender multicasts unsolicited neighbour advertisements to all nodes.
type naSender struct {
	conn *icmp.PacketConn
	pc   *ipv6.PacketConn
	msg  []byte
	cm   *ipv6.ControlMessage
}

var allNodes = &net.IPAddr{IP: net.IPv6linklocalallnodes}

func openNA(addr netip.Addr, link linkInfo) (*naSender, error) {
	msg, err := unsolicitedNA(link.HardwareAddr, addr)
	if err != nil {
		return nil, err
	}
	conn, err := icmp.ListenPacket("ip6:ipv6-icmp", "::")
	if err != nil {
		return nil, fmt.Errorf("open ICMPv6 socket: %w", err)
	}
	pc := conn.IPv6PacketConn()
	var block ipv6.ICMPFilter
	block.SetAll(true) // send only
	ifi := &net.Interface{Index: link.Index, Name: link.Name, HardwareAddr: link.HardwareAddr}
	// Receivers drop neighbour discovery packets with a hop limit below
	// 255 (RFC 4861): they must not have crossed a router.
	if err := errors.Join(pc.SetICMPFilter(&block), pc.SetMulticastHopLimit(255), pc.SetMulticastInterface(ifi)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("set up ICMPv6 socket: %w", err)
	}
	cm := &ipv6.ControlMessage{HopLimit: 255, Src: addr.AsSlice(), IfIndex: link.Index}
	return &naSender{conn: conn, pc: pc, msg: msg, cm: cm}, nil
}

func (s *naSender) send() error {
	if err := retry.OnError(sendBackoff, func(err error) bool { return errors.Is(err, unix.ENOBUFS) }, func() error {
		_, err := s.pc.WriteTo(s.msg, s.cm, allNodes)
		return err
	}); err != nil {
		return fmt.Errorf("send neighbour advertisement: %w", err)
	}
	return nil
}

func (s *naSender) Close() error { return s.conn.Close() }

// unsolicitedNA returns an ICMPv6 neighbour advertisement for ip at hw,
// with the override flag (replace what caches hold) and without the
// solicited flag, carrying the target link-layer address option. The
// kernel fills in the checksum.
func unsolicitedNA(hw net.HardwareAddr, ip netip.Addr) ([]byte, error) {
	if !ip.Is6() || ip.Is4In6() || len(hw) != 6 {
		return nil, fmt.Errorf("neighbour advertisement needs an IPv6 address and an Ethernet address, got %s and %s", ip, hw)
	}
	body := make([]byte, 4+16+8)
	body[0] = 0x20 // flags R=0 S=0 O=1
	copy(body[4:20], ip.AsSlice())
	body[20] = 2 // option: target link-layer address
	body[21] = 1 // option length, in units of 8 octets
	copy(body[22:28], hw)
	m := icmp.Message{Type: ipv6.ICMPTypeNeighborAdvertisement, Body: &icmp.RawBody{Data: body}}
	return m.Marshal(nil)
}

// announcement is a running announcement schedule.
type announcement struct{ cancel context.CancelFunc }

// announce sends the first announcement of each address the plan
// announces, and starts the schedule of the rest. Every announcement is
// an add: a fenced or flushed node does not claim an address it no longer
// has.
func (d *Dataplane) announce(adm pass, p *plan) {
	desired := map[netip.Addr]bool{}
	for _, t := range slices.Concat(p.added, p.updated, p.unchanged) {
		desired[t.Address] = !p.dropped[t.Address]
		if t.NoAnnounce {
			// Announced before it became so: stop the repeats.
			d.stopAnnouncing(t.Address)
			delete(d.unannounced, t.Address)
		}
	}
	for a := range d.unannounced {
		if !desired[a] {
			delete(d.unannounced, a)
		}
	}
	for _, t := range p.announce {
		if !desired[t.Address] {
			continue
		}
		if err := d.startAnnouncing(adm, t); err != nil {
			d.unannounced[t.Address] = true
			p.failAnnouncement(t.Address, err)
			continue
		}
		delete(d.unannounced, t.Address)
	}
}

// startAnnouncing announces t now and schedules the repeats, replacing a
// schedule already running for the address.
func (d *Dataplane) startAnnouncing(adm pass, t target) error {
	d.stopAnnouncing(t.Address)
	if d.holdOver() {
		return ErrHoldEnding
	}
	s, err := openSender(d.ns, t.Address, t.link)
	if err != nil {
		return err
	}
	if err := adm.add(s.send); err != nil {
		_ = s.Close()
		return err
	}
	d.log.V(1).Info("announced", "address", t.Address, "interface", t.link.Name)
	repeats := d.opts.Announcements[1:]
	if len(repeats) == 0 {
		return s.Close()
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(d.bg)
	adm = adm.detached(ctx)
	a := &announcement{cancel: cancel}
	d.announcing[t.Address] = a
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer func() { _ = s.Close() }()
		defer d.forgetAnnouncement(t.Address, a)
		timer := time.NewTimer(time.Until(start.Add(repeats[0])))
		defer timer.Stop()
		for i, at := range repeats {
			if i > 0 {
				timer.Reset(time.Until(start.Add(at)))
			}
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			if d.holdOver() {
				// The agent was frozen past its hold (SIGSTOP, starved):
				// the address may be another node's by now.
				d.log.Info("announcements stopped: the heartbeat hold is over", "address", t.Address)
				return
			}
			err := adm.add(s.send)
			switch {
			case errors.Is(err, ErrFenced) || errors.Is(err, errFlushed):
				return
			case err != nil:
				d.log.Error(err, "announcement failed", "address", t.Address, "interface", t.link.Name)
			}
		}
	}()
	return nil
}

// holdOver reports whether Options.HoldDeadline or GateDeadline has
// passed: from then on the
// controller may give the address to another node, and announcing it
// would point the neighbours' caches at the wrong node.
func (d *Dataplane) holdOver() bool {
	now := time.Now()
	return (d.opts.HoldDeadline != nil && !now.Before(d.opts.HoldDeadline())) ||
		(d.opts.GateDeadline != nil && !now.Before(d.opts.GateDeadline()))
}

// stopAnnouncing cancels the schedule of addr, if one runs.
func (d *Dataplane) stopAnnouncing(addr netip.Addr) {
	if a, ok := d.announcing[addr]; ok {
		a.cancel()
		delete(d.announcing, addr)
	}
}

// forgetAnnouncement removes a finished schedule, unless a newer one
// replaced it meanwhile.
func (d *Dataplane) forgetAnnouncement(addr netip.Addr, a *announcement) {
	a.cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.announcing[addr] == a {
		delete(d.announcing, addr)
	}
}
