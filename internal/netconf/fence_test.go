package netconf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// natOf reads kubext's NAT maps (with timeouts) in the node namespace,
// over connections of the test's own.
func natOf(t *testing.T, topo *topology) func() (natState, error) {
	probe := newDataplane(t, topo, func(o *Options) { o.AddressLifetime = time.Second })
	return func() (natState, error) {
		n, _, err := probe.readNAT()
		return n, err
	}
}

func natSize(n natState, err error) (int, error) { return len(n.dnat) + len(n.snat), err }

// A frozen agent (SIGSTOP, starved of CPU) neither refreshes nor fences:
// the kernel itself must drop the address and its NAT entries, or the SNAT
// entry would go on sending as the static address for whatever pod gets
// the pod address next. With refreshes, everything stays.
func TestNATEntriesExpireWithTheAddress(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	nat := natOf(t, topo)
	d := newDataplane(t, topo, func(o *Options) { o.AddressLifetime = time.Second })
	want := []Assignment{{Address: staticV4, PodIP: podV4, Interface: "eth0"}, {Address: staticV6, PodIP: podV6, Interface: "eth0"}}
	apply(t, d, want...)
	g.Expect(natSize(nat())).To(gomega.Equal(4))

	// Refreshed every 300 ms for 3 s: still all there.
	for range 10 {
		g.Expect(d.Refresh()).To(gomega.Succeed())
		time.Sleep(300 * time.Millisecond)
	}
	g.Expect(d.Current()).To(gomega.Equal(want))
	g.Expect(natSize(nat())).To(gomega.Equal(4))

	// Frozen: no refresh. Addresses and NAT entries all go.
	g.Eventually(func() (int, error) { return natSize(nat()) }, 5*time.Second, 100*time.Millisecond).Should(gomega.BeZero())
	g.Eventually(d.Current, 5*time.Second, 100*time.Millisecond).Should(gomega.BeEmpty())

	// The pod address is reused by another pod: its traffic leaves with
	// its own address, not the static one (the routing rule left over
	// still leads it out of the uplink, which is harmless).
	otherV4 := netip.MustParseAddr("203.0.113.5")
	addAddrs(t, topo.client, "lo", otherV4.String()+"/32")
	serve(t, topo.client, port(otherV4, 8081), false)
	g.Expect(throughFrom(g, topo.pod, podV4, port(otherV4, 8081)).peer).To(gomega.Equal(podV4))

	// The agent wakes up still holding its Lease: the next Apply restores
	// everything.
	r := apply(t, d, want...)
	g.Expect(r.Added).To(gomega.HaveLen(2))
	g.Expect(d.Current()).To(gomega.Equal(want))
	g.Expect(throughFrom(g, topo.pod, podV4, port(otherV4, 8081)).peer).To(gomega.Equal(staticV4))
}

// A refresh renews each entry without a moment where it is missing, and
// never brings back what Apply removed.
func TestRefreshKeepsEntriesAndAddsNothing(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	nat := natOf(t, topo)
	d := newDataplane(t, topo, func(o *Options) { o.AddressLifetime = 2 * time.Second })
	serve(t, topo.pod, port(podV4, 8080), false)
	apply(t, d, Assignment{Address: staticV4, PodIP: podV4}, Assignment{Address: staticV4b, PodIP: podV4b})

	// Refreshing while Applies remove and re-add staticV4b: whatever the
	// interleaving, an Apply without it leaves no trace of it.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			// ErrLapsed may be said while an Apply removes or adds: it
			// only asks for one more Apply.
			if err := d.Refresh(); err != nil && !errors.Is(err, ErrLapsed) {
				t.Errorf("Refresh: %v", err)
				return
			}
		}
	})
	for range 20 {
		apply(t, d, Assignment{Address: staticV4, PodIP: podV4})
		cur, err := d.Current()
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(cur).To(gomega.Equal([]Assignment{{Address: staticV4, PodIP: podV4, Interface: "eth0"}}))
		apply(t, d, Assignment{Address: staticV4, PodIP: podV4}, Assignment{Address: staticV4b, PodIP: podV4b})
		g.Expect(through(g, topo.client, port(staticV4, 8080)).server).To(gomega.Equal(podV4))
	}
	cancel()
	wg.Wait()
	g.Expect(natSize(nat())).To(gomega.Equal(4))
}

// Fence takes effect at once even while an Apply is stuck halfway (here:
// after reading the kernel, before writing), and that Apply, once it
// goes on, adds nothing: not while fenced, and not after Unfence either.
func TestFenceDoesNotWaitForAStuckApply(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	d := newDataplane(t, topo, func(o *Options) { o.AddressLifetime = 5 * time.Second })
	a := Assignment{Address: staticV4, PodIP: podV4, Interface: "eth0"}
	b := Assignment{Address: staticV4b, PodIP: podV4b, Interface: "eth0"}
	apply(t, d, a)

	stuck, release := make(chan struct{}), make(chan struct{})
	d.beforeWrites = func() {
		close(stuck)
		<-release
	}
	done := make(chan error, 1)
	go func() {
		_, err := d.Apply(context.Background(), []Assignment{a, b})
		done <- err
	}()
	<-stuck

	start := time.Now()
	g.Expect(d.Fence(context.Background())).To(gomega.Succeed())
	g.Expect(time.Since(start)).To(gomega.BeNumerically("<", time.Second))
	g.Expect(traces(t, topo)).To(gomega.BeEmpty())
	// Refreshing adds nothing while fenced.
	g.Expect(d.Refresh()).To(gomega.MatchError(ErrFenced))

	d.Unfence() // the Lease is back before the stuck Apply goes on
	close(release)
	g.Expect(<-done).To(gomega.HaveOccurred())
	g.Expect(traces(t, topo)).To(gomega.BeEmpty())

	// A new Apply programs again.
	d.beforeWrites = nil
	apply(t, d, a, b)
	g.Expect(d.Current()).To(gomega.Equal([]Assignment{a, b}))
}

// Fence also stops the announcement repeats of an Apply made before it.
func TestFenceStopsAnnouncing(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	d := newDataplane(t, topo, func(o *Options) { o.Announcements = []time.Duration{0, 500 * time.Millisecond} })
	apply(t, d, Assignment{Address: staticV4, PodIP: podV4})
	g.Expect(d.Fence(context.Background())).To(gomega.Succeed())
	expectNoAnnouncement(t, g, topo)
}

// An agent frozen past its hold and then resumed sends no announcement it
// had scheduled before the freeze: the address may be another node's now.
func TestNoAnnouncementAfterTheHold(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	var mu sync.Mutex
	deadline := time.Now().Add(1500 * time.Millisecond)
	d := newDataplane(t, topo, func(o *Options) {
		o.AddressLifetime = 5 * time.Second
		o.Announcements = []time.Duration{0, 700 * time.Millisecond}
		o.HoldDeadline = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return deadline
		}
	})
	apply(t, d, Assignment{Address: staticV4, PodIP: podV4})
	// The "freeze": the hold ends before the repeat is due.
	mu.Lock()
	deadline = time.Now()
	mu.Unlock()
	expectNoAnnouncement(t, g, topo)
}

// expectNoAnnouncement checks for a second that no announcement of
// staticV4 reaches the client: its stale neighbour entry stays.
func expectNoAnnouncement(t *testing.T, g gomega.Gomega, topo *topology) {
	t.Helper()
	staleNeighbour(t, topo.client, staticV4)
	sysctl(t, topo.client, "net.ipv4.conf.eth0.arp_accept", "1")
	g.Consistently(func() (string, error) {
		hw, err := neighbour(topo.client, staticV4)
		return hw.String(), err
	}, time.Second, 50*time.Millisecond).Should(gomega.Equal("02:00:00:00:00:99"))
}

// traces lists what kubext has in the node namespace: its addresses, NAT
// table, rules and routes.
func traces(t *testing.T, topo *topology) []string {
	t.Helper()
	probe := newDataplane(t, topo)
	var out []string
	links, err := probe.links()
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := probe.listAddresses(links)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if a.owned {
			out = append(out, "address "+a.IP.String())
		}
	}
	if exists, err := probe.tableExists(); err != nil || exists {
		out = append(out, fmt.Sprintf("nftables table (%v)", err))
	}
	rules, err := probe.ownedRules()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		out = append(out, "rule "+r.String())
	}
	routes, err := probe.nl.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if probe.ownsTable(r.Table) {
			out = append(out, "route "+r.String())
		}
	}
	return out
}

// No lifetime written outlives the agent's hold (Options.HoldDeadline):
// whatever moment a freeze comes, the kernel lets go before the controller
// may confirm the agent lost. A write the hold leaves less than a second
// for waits for the next renewal, and Refresh says something is missing.
func TestLifetimesNeverOutliveTheHold(t *testing.T) {
	topo := newTopology(t)
	g := gomega.NewWithT(t)
	var mu sync.Mutex
	deadline := time.Now().Add(1700 * time.Millisecond)
	hold := func(t time.Time) {
		mu.Lock()
		deadline = t
		mu.Unlock()
	}
	d := newDataplane(t, topo, func(o *Options) {
		o.AddressLifetime = 5 * time.Second
		o.HoldDeadline = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return deadline
		}
	})
	want := Assignment{Address: staticV4, PodIP: podV4, Interface: "eth0"}
	apply(t, d, want)
	validLft := func() uint32 { return validLifetime(g, topo, staticV4) }
	g.Expect(validLft()).To(gomega.BeNumerically("<=", 1), "1.7 s of hold left: a 1 s lifetime, not the 5 s option")

	// The hold ends in half a second: nothing is written, nothing waits in
	// the kernel for longer than the hold, and Refresh says so.
	hold(time.Now().Add(500 * time.Millisecond))
	g.Eventually(d.Refresh, 3*time.Second, 100*time.Millisecond).Should(gomega.MatchError(ErrLapsed), "once the address has expired")
	_, err := d.Apply(context.Background(), []Assignment{want, {Address: staticV4b, PodIP: podV4b, Interface: "eth0"}})
	g.Expect(err).To(gomega.MatchError(gomega.ContainSubstring("hold ends in less than a second")))
	g.Eventually(d.Current, 3*time.Second, 100*time.Millisecond).Should(gomega.BeEmpty())

	// The next renewal: everything is written again.
	hold(time.Now().Add(3 * time.Second))
	g.Expect(d.Refresh()).To(gomega.MatchError(ErrLapsed))
	apply(t, d, want)
	g.Expect(d.Refresh()).To(gomega.Succeed())
}
