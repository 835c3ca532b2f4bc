package netconf

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// quickDial tries a connection from n to addr with a short timeout:
// whether anything answers for the address.
func quickDial(n *testNS, addr netip.AddrPort) error {
	return n.do(func() error {
		d := &net.Dialer{Timeout: 300 * time.Millisecond}
		c, err := d.DialContext(context.Background(), "tcp", addr.String())
		if err == nil {
			_ = c.Close()
		}
		return err
	})
}

// forget removes the client's neighbour entry for ip, so that the next
// packet needs an ARP reply.
func forget(t *testing.T, n *testNS, ip netip.Addr) {
	t.Helper()
	l, err := n.nl.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	_ = n.nl.NeighDel(&netlink.Neigh{LinkIndex: l.Attrs().Index, IP: ip.AsSlice()})
}

// gatedDataplane is a Dataplane whose hold gate's deadline the test
// sets with hold (an hour from now to begin with); deadline reads it.
func gatedDataplane(t *testing.T, topo *topology) (d *Dataplane, hold func(time.Duration), deadline func() time.Time) {
	var at atomic.Int64
	hold = func(d time.Duration) { at.Store(time.Now().Add(d).UnixNano()) }
	deadline = func() time.Time { return time.Unix(0, at.Load()) }
	hold(time.Hour)
	d = newDataplane(t, topo, func(o *Options) {
		o.AddressLifetime = 30 * time.Second
		o.GateDeadline = deadline
		// A loaded test machine (-race, parallel packages) must not pass
		// for a stopped agent: late commits are TestHoldGateLateCommitClosesIt's.
		o.GateLateLimit = 200 * time.Millisecond
	})
	return d, hold, deadline
}

// The hold gate: while the deadline is ahead the address answers both
// ways; once it has passed with no refresh (a frozen agent), nothing
// answers for it within milliseconds — no ARP reply, no connection, no
// egress as the address — although the address is still on the interface
// (its whole-second lifetime has not run out); a refresh with a later
// deadline brings it back; Fence closes it at once.
func TestHoldGateSilencesAtItsDeadline(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	d, hold, deadline := gatedDataplane(t, topo)
	apply(t, d, Assignment{Address: staticV4, PodIP: podV4})
	serve(t, topo.pod, port(podV4, 8080), false)
	serve(t, topo.client, port(farV4, 8081), false)
	g.Expect(through(g, topo.client, port(staticV4, 8080)).server).To(gomega.Equal(podV4))
	g.Expect(through(g, topo.pod, port(farV4, 8081)).peer).To(gomega.Equal(staticV4))

	// A short hold, and nobody refreshes it.
	hold(300 * time.Millisecond)
	g.Expect(d.Refresh()).To(gomega.Succeed())
	end := deadline()
	g.Expect(quickDial(topo.client, port(staticV4, 8080))).To(gomega.Succeed(), "before the deadline")
	time.Sleep(time.Until(end.Add(20 * time.Millisecond)))
	// The address is still there: the gate, not the lifetime, silences it.
	cur, err := d.Current()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(cur).To(gomega.HaveLen(1))
	g.Expect(quickDial(topo.client, port(staticV4, 8080))).NotTo(gomega.Succeed(), "a connection after the deadline")
	g.Expect(quickDial(topo.pod, port(farV4, 8081))).NotTo(gomega.Succeed(), "egress as the address after the deadline")
	forget(t, topo.client, staticV4)
	g.Expect(quickDial(topo.client, port(staticV4, 8080))).NotTo(gomega.Succeed())
	g.Expect(neighbour(topo.client, staticV4)).To(gomega.BeNil(), "an ARP reply after the deadline")

	// Held again: everything comes back without an Apply.
	hold(time.Hour)
	g.Expect(d.Refresh()).To(gomega.Succeed())
	g.Expect(through(g, topo.client, port(staticV4, 8080)).server).To(gomega.Equal(podV4))
	g.Expect(through(g, topo.pod, port(farV4, 8081)).peer).To(gomega.Equal(staticV4))

	// Refreshed every 50 ms for a second with 200 ms holds: it keeps
	// answering throughout.
	for range 20 {
		hold(200 * time.Millisecond)
		g.Expect(d.Refresh()).To(gomega.Succeed())
		g.Expect(quickDial(topo.client, port(staticV4, 8080))).To(gomega.Succeed())
		time.Sleep(50 * time.Millisecond)
	}

	g.Expect(d.Fence(context.Background())).To(gomega.Succeed())
	g.Expect(quickDial(topo.client, port(staticV4, 8080))).NotTo(gomega.Succeed(), "after Fence")
}

// A deadline that has already passed when the address is programmed
// holds nothing: the address is owned and silent from the start.
func TestHoldGatePastDeadlineHoldsNothing(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	d := newDataplane(t, topo, func(o *Options) {
		o.GateDeadline = func() time.Time { return time.Now().Add(-time.Second) }
	})
	// Not announced either: the hold is over (ErrHoldEnding, which the
	// agent takes as "after the next renewal").
	_, err := d.Apply(context.Background(), []Assignment{{Address: staticV4, PodIP: podV4}})
	g.Expect(err).To(gomega.MatchError(gomega.ContainSubstring(ErrHoldEnding.Error())))
	serve(t, topo.pod, port(podV4, 8080), false)
	g.Expect(quickDial(topo.client, port(staticV4, 8080))).NotTo(gomega.Succeed())
	g.Expect(neighbour(topo.client, staticV4)).To(gomega.BeNil())
}

// listenUDP receives datagrams on addr in n and sends each one's source
// on the channel, until the test ends (at most 100 datagrams).
func listenUDP(t *testing.T, n *testNS, addr netip.AddrPort) <-chan netip.Addr {
	t.Helper()
	var c *net.UDPConn
	if err := n.do(func() error {
		var err error
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		return err
	}); err != nil {
		t.Fatalf("%s: listen on %s: %v", n.name, addr, err)
	}
	from := make(chan netip.Addr, 100)
	done := make(chan struct{})
	t.Cleanup(func() { _ = c.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 64)
		for range cap(from) {
			_, src, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			from <- src.Addr().Unmap()
		}
	}()
	return from
}

// sendUDP sends one datagram from n to addr.
func sendUDP(t *testing.T, n *testNS, addr netip.AddrPort) {
	t.Helper()
	if err := n.do(func() error {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("kubext"))
		return err
	}); err != nil {
		t.Fatalf("%s: send to %s: %v", n.name, addr, err)
	}
}

// neighbourState is n's neighbour-table state for ip on eth0 (0: none).
func neighbourState(t *testing.T, n *testNS, ip netip.Addr) int {
	t.Helper()
	neighs, err := n.nl.NeighList(eth0Of(t, n).Attrs().Index, unix.AF_INET)
	if err != nil {
		t.Fatalf("%s: %v", n.name, err)
	}
	for _, nb := range neighs {
		if a, ok := netip.AddrFromSlice(nb.IP); ok && a.Unmap() == ip {
			return nb.State
		}
	}
	return 0
}

// The hold gate's queued-frames gap, closed by the egress gate: the
// node's uplink loses its carrier, the pod sends a datagram while the
// hold is valid (it passes the inet table's check, is translated to the
// static address, and waits in the neighbour table's queue for the
// link-layer address of its destination), the hold's deadline passes,
// the link comes back and the destination talks to the node, which
// learns its address and flushes the queue. Without the egress gate the datagram
// leaves as the address after the deadline — a revived node speaking
// for an address another node may hold by now; with it, nothing does.
// The first case is the kernel refusing the egress hook (as one older
// than 5.16 does), which also shows the rest of the gate working without
// it; if a kernel stopped queueing such frames, that case would fail and
// say the second proves nothing.
func TestHoldGateDropsFramesQueuedBeforeItsDeadline(t *testing.T) {
	for _, c := range []struct {
		name         string
		refuse       bool
		leavesAsAddr bool
	}{
		{name: "kernel refuses the egress hook", refuse: true, leavesAsAddr: true},
		{name: "egress gate", leavesAsAddr: false},
	} {
		t.Run(c.name, func(t *testing.T) {
			topo := newTopology(t)
			g := gomega.NewWithT(t)
			d, hold, deadline := gatedDataplane(t, topo)
			if c.refuse {
				// A netdev hook number the kernel's filter chains do not
				// have: refused with EOPNOTSUPP, as egress is by a kernel
				// without it (the Dataplane's kernels share the setting).
				d.egress.hook = nftables.ChainHookRef(5)
			}
			apply(t, d, Assignment{Address: staticV4, PodIP: podV4})
			g.Expect(d.kernel.egress.refused.Load()).To(gomega.Equal(c.refuse))
			from := listenUDP(t, topo.client, port(farV4, 8082))
			sendUDP(t, topo.pod, port(farV4, 8082))
			g.Eventually(from).WithTimeout(3*time.Second).Should(gomega.Receive(gomega.Equal(staticV4)), "the pod's datagram, while held")

			// The node's link loses its carrier (the client's end goes
			// down), which empties its neighbour table.
			clientEth := eth0Of(t, topo.client)
			g.Expect(topo.client.nl.LinkSetDown(clientEth)).To(gomega.Succeed())
			g.Eventually(func() uint32 { return eth0Of(t, topo.node).Attrs().RawFlags & unix.IFF_LOWER_UP }).
				WithTimeout(2 * time.Second).WithPolling(10 * time.Millisecond).Should(gomega.BeZero())
			g.Eventually(func() int { return neighbourState(t, topo.node, farV4) }).
				WithTimeout(2 * time.Second).WithPolling(10 * time.Millisecond).Should(gomega.BeZero())

			// A short hold; the datagram waits for the client's address.
			hold(200 * time.Millisecond)
			g.Expect(d.Refresh()).To(gomega.Succeed())
			end := deadline()
			sendUDP(t, topo.pod, port(farV4, 8082))
			g.Eventually(func() int { return neighbourState(t, topo.node, farV4) }).
				WithTimeout(time.Second).WithPolling(5*time.Millisecond).Should(gomega.Equal(netlink.NUD_INCOMPLETE), "the datagram waits in the neighbour queue")
			time.Sleep(time.Until(end.Add(20 * time.Millisecond)))

			// The link comes back, and the client talks to the node.
			g.Expect(topo.client.nl.LinkSetUp(clientEth)).To(gomega.Succeed())
			g.Eventually(func() uint32 { return eth0Of(t, topo.node).Attrs().RawFlags & unix.IFF_LOWER_UP }).
				WithTimeout(2 * time.Second).WithPolling(10 * time.Millisecond).ShouldNot(gomega.BeZero())
			_, _, _ = dialFrom(topo.client, farV4, port(nodeV4, 9), false)
			g.Expect(neighbourState(t, topo.node, farV4)&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED|netlink.NUD_NONE)).
				To(gomega.BeZero(), "the node resolved the client (its queue flushed)")
			if c.leavesAsAddr {
				g.Eventually(from).WithTimeout(time.Second).Should(gomega.Receive(gomega.Equal(staticV4)),
					"the queued datagram leaves after the deadline (the gap the egress gate closes)")
				return
			}
			g.Consistently(from).WithTimeout(500*time.Millisecond).ShouldNot(gomega.Receive(), "a datagram as the address after the deadline")
			// Held again, the pod speaks as the address at once.
			hold(time.Hour)
			g.Expect(d.Refresh()).To(gomega.Succeed())
			sendUDP(t, topo.pod, port(farV4, 8082))
			g.Eventually(from).WithTimeout(3 * time.Second).Should(gomega.Receive(gomega.Equal(staticV4)))
		})
	}
}

// RefreshGate moves the gate and nothing else: a passed deadline silences
// the address, a later one brings it back without an Apply, the address's
// whole-second lifetime is left to run (Refresh rewrites it), and once
// fenced it opens nothing.
func TestRefreshGateMovesOnlyTheGate(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	d, hold, _ := gatedDataplane(t, topo)
	apply(t, d, Assignment{Address: staticV4, PodIP: podV4})
	serve(t, topo.pod, port(podV4, 8080), false)
	g.Expect(through(g, topo.client, port(staticV4, 8080)).server).To(gomega.Equal(podV4))
	validLft := func() uint32 { return validLifetime(g, topo, staticV4) }
	written := validLft()
	g.Expect(written).To(gomega.BeNumerically(">", 1))

	hold(-time.Second)
	g.Expect(d.RefreshGate()).To(gomega.Succeed())
	g.Expect(quickDial(topo.client, port(staticV4, 8080))).NotTo(gomega.Succeed(), "a connection after the deadline")
	// The lifetime's clock moves on by a whole second meanwhile.
	time.Sleep(1100 * time.Millisecond)
	hold(time.Hour)
	g.Expect(d.RefreshGate()).To(gomega.Succeed())
	g.Expect(through(g, topo.client, port(staticV4, 8080)).server).To(gomega.Equal(podV4))
	left := validLft()
	g.Expect(left).To(gomega.BeNumerically("<", written), "RefreshGate rewrote the address's lifetime")
	g.Expect(d.Refresh()).To(gomega.Succeed())
	g.Expect(validLft()).To(gomega.BeNumerically(">", left), "Refresh rewrites it")

	g.Expect(d.Fence(context.Background())).To(gomega.Succeed())
	g.Expect(d.RefreshGate()).To(gomega.MatchError(ErrFenced))
	g.Expect(quickDial(topo.client, port(staticV4, 8080))).NotTo(gomega.Succeed(), "after Fence")
}

// A gate write held up between reading its deadline and committing (the
// agent stopped or starved there) must not carry the hold past the
// deadline: the kernel counts the timeout from the commit. A write that
// commits later than GateLateLimit is written again at once, to the
// deadline counted afresh; late again, the gate is closed and the write
// says ErrLapsed; a refresh on time opens it again.
func TestHoldGateLateCommitClosesIt(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	d, hold, deadline := gatedDataplane(t, topo)
	apply(t, d, Assignment{Address: staticV4, PodIP: podV4})
	serve(t, topo.pod, port(podV4, 8080), false)
	g.Expect(through(g, topo.client, port(staticV4, 8080)).server).To(gomega.Equal(podV4))
	// pause stops k's next n gate commits for p.
	pause := func(k *kernel, p time.Duration, n int) {
		k.beforeGateFlush = func() {
			if n > 0 {
				n--
				time.Sleep(p)
			}
		}
		t.Cleanup(func() { k.beforeGateFlush = nil })
	}
	answers := func() bool { return quickDial(topo.client, port(staticV4, 8080)) == nil }

	for name, refresh := range map[string]func() error{"RefreshGate": d.RefreshGate, "Refresh": d.Refresh} {
		// Stopped once, past the deadline: committed, the element would
		// hold for another 300 ms; written again, it holds nothing.
		hold(300 * time.Millisecond)
		pause(d.refresher, 500*time.Millisecond, 1)
		g.Expect(refresh()).To(gomega.Succeed(), name)
		g.Expect(answers()).To(gomega.BeFalse(), name+": answering past the deadline")

		// Stopped once, well before the deadline: it holds to the deadline
		// and not 500 ms beyond.
		hold(time.Hour)
		g.Expect(refresh()).To(gomega.Succeed(), name)
		hold(1500 * time.Millisecond)
		end := deadline()
		pause(d.refresher, 500*time.Millisecond, 1)
		g.Expect(refresh()).To(gomega.Succeed(), name)
		g.Expect(answers()).To(gomega.BeTrue(), name+": silent before the deadline")
		time.Sleep(time.Until(end.Add(50 * time.Millisecond)))
		g.Expect(answers()).To(gomega.BeFalse(), name+": answering past the deadline")

		// Stopped on every commit: closed, and ErrLapsed.
		hold(time.Hour)
		pause(d.refresher, 400*time.Millisecond, 2)
		g.Expect(refresh()).To(gomega.MatchError(ErrLapsed), name)
		g.Expect(answers()).To(gomega.BeFalse(), name+": answering after two late commits")
		// On time, it opens again.
		g.Expect(refresh()).To(gomega.Succeed(), name)
		g.Expect(through(g, topo.client, port(staticV4, 8080)).server).To(gomega.Equal(podV4), name)
	}

	// An Apply alike.
	hold(300 * time.Millisecond)
	applier := d.kernel
	pause(applier, 500*time.Millisecond, 2)
	_, err := d.Apply(context.Background(), []Assignment{{Address: staticV4, PodIP: podV4}})
	g.Expect(err).To(gomega.MatchError(ErrLapsed))
	g.Expect(answers()).To(gomega.BeFalse(), "Apply: answering past the deadline")
	hold(time.Hour)
	apply(t, d, Assignment{Address: staticV4, PodIP: podV4})
	g.Expect(through(g, topo.client, port(staticV4, 8080)).server).To(gomega.Equal(podV4))
}

// validLifetime is the valid lifetime (seconds) the node's kernel has for
// addr, 0 when the address is not there.
func validLifetime(g gomega.Gomega, topo *topology, addr netip.Addr) uint32 {
	addrs, err := topo.node.nl.AddrList(nil, netlink.FAMILY_V4)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	for _, a := range addrs {
		if a.IP.Equal(addr.AsSlice()) {
			return uint32(a.ValidLft)
		}
	}
	return 0
}
