package netconf

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
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

// The hold gate: while the deadline is ahead the address answers both
// ways; once it has passed with no refresh (a frozen agent), nothing
// answers for it within milliseconds — no ARP reply, no connection, no
// egress as the address — although the address is still on the interface
// (its whole-second lifetime has not run out); a refresh with a later
// deadline brings it back; Fence closes it at once.
func TestHoldGateSilencesAtItsDeadline(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	var deadline atomic.Int64
	hold := func(d time.Duration) { deadline.Store(time.Now().Add(d).UnixNano()) }
	hold(time.Hour)
	d := newDataplane(t, topo, func(o *Options) {
		o.AddressLifetime = 30 * time.Second
		o.GateDeadline = func() time.Time { return time.Unix(0, deadline.Load()) }
	})
	apply(t, d, Assignment{Address: staticV4, PodIP: podV4})
	serve(t, topo.pod, port(podV4, 8080), false)
	serve(t, topo.client, port(farV4, 8081), false)
	g.Expect(through(g, topo.client, port(staticV4, 8080)).server).To(gomega.Equal(podV4))
	g.Expect(through(g, topo.pod, port(farV4, 8081)).peer).To(gomega.Equal(staticV4))

	// A short hold, and nobody refreshes it.
	hold(300 * time.Millisecond)
	g.Expect(d.Refresh()).To(gomega.Succeed())
	end := time.Unix(0, deadline.Load())
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
