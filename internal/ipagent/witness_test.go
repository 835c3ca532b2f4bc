package ipagent

import (
	"maps"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/witness"
	"github.com/kubext/kubext/test/testenv"
)

// fakeWitnesses stands in for the agent's witnessnet.Peer (whose protocol
// internal/witness and internal/witnessnet test): the tests say which
// witness sets vouch, and see which nodes it is asked to probe.
type fakeWitnesses struct {
	mu     sync.Mutex
	gen    witness.Gen
	held   map[string]bool // witness set (joined by ",") -> vouched for
	probed map[string]netip.AddrPort
}

// firstGen is the fake peer's generation: as large as a real one (a
// UnixNano), beyond what a float64 holds exactly, so that every write of
// it is checked to keep all 64 bits.
const firstGen = witness.Gen(1795894446968572042)

func newFakeWitnesses() *fakeWitnesses {
	return &fakeWitnesses{gen: firstGen, held: map[string]bool{}, probed: map[string]netip.AddrPort{}}
}

func (w *fakeWitnesses) Gen() witness.Gen {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

func (w *fakeWitnesses) HeldUntil(ws []string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held[strings.Join(ws, ",")] {
		return time.Now().Add(time.Hour)
	}
	return time.Time{}
}

func (w *fakeWitnesses) SetWitnesses(ws map[string]netip.AddrPort) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.probed = maps.Clone(ws)
}

// vouch makes a witness set vouch for this node (or stop), and pokes the
// agent as the peer's answers do.
func (w *fakeWitnesses) vouch(set string, held bool) {
	w.mu.Lock()
	w.held[set] = held
	w.mu.Unlock()
	agent.Poke()
}

func (w *fakeWitnesses) probing() map[string]netip.AddrPort {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.probed)
}

// witnessNode creates a node with an internal address, for an IP to name
// as its witness.
func (f *fixture) witnessNode(name, addr string) string {
	f.T.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.name(name)},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}}}}
	f.G.Expect(k8s.Create(f.Ctx, n)).To(Succeed())
	orig := n.DeepCopy()
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}}
	f.G.Expect(k8s.Status().Patch(f.Ctx, n, client.MergeFrom(orig))).To(Succeed())
	f.T.Cleanup(func() { _ = k8s.Delete(f.Ctx, n) })
	return n.Name
}

func (f *fixture) attachedGeneration(name string) func() int64 {
	return func() int64 {
		ip := &ipv1.IP{}
		f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: name}, ip)).To(Succeed())
		return ip.Status.AttachedGeneration
	}
}

// An IP that names witnesses is claimed only once they vouch for this
// node, and then in its generation; the agent probes them at their nodes'
// addresses meanwhile. When they stop vouching the node lets go: the
// address leaves the kernel and the claim is withdrawn.
func TestWitnessHoldNeedsItsWitnesses(t *testing.T) {
	f := newFixture(t)
	w := f.witnessNode("w1", "192.0.2.91")
	pod := f.pod("held", thisNode, "10.244.1.40")
	ip := f.ip("held", "192.0.2.40", ipv1.IPStatus{Node: thisNode, Pod: pod, Witnesses: []string{w}})
	f.G.Eventually(witnesses.probing, testenv.WaitFor).Should(HaveKeyWithValue(w, netip.MustParseAddrPort("192.0.2.91:7946")))
	f.G.Consistently(f.attachedNode(ip), quiet, 100*time.Millisecond).Should(BeEmpty())
	f.G.Expect(dp.everApplied(netip.MustParseAddr("192.0.2.40"))).To(BeFalse())

	witnesses.vouch(w, true)
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(pod))
	f.G.Expect(f.attachedGeneration(ip)()).To(BeEquivalentTo(firstGen))

	witnesses.vouch(w, false)
	f.G.Eventually(f.attachedNode(ip), testenv.WaitFor).Should(BeEmpty())
	f.G.Expect(f.attachedGeneration(ip)()).To(BeZero())
	f.G.Expect(dp.programmed(netip.MustParseAddr("192.0.2.40"))).To(BeZero())
}

// A lapsed heartbeat (a stalled API server) does not silence what the node
// holds on its witnesses' word; as soon as it also holds an IP on its
// Lease, a lapse fences everything, as before.
func TestLeaseLossSparesWitnessHolds(t *testing.T) {
	f := newFixture(t)
	t.Cleanup(func() { lease.held.Store(true); agent.Regained() })
	w := f.witnessNode("w2", "192.0.2.92")
	witnesses.vouch(w, true)
	pod := f.pod("witnessed", thisNode, "10.244.1.41")
	ip := f.ip("witnessed", "192.0.2.41", ipv1.IPStatus{Node: thisNode, Pod: pod, Witnesses: []string{w}})
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(pod))
	f.G.Eventually(agent.Idle, testenv.WaitFor).Should(BeTrue(), "nothing held on the Lease: it may be renewed rarely")

	flushes := dp.flushCount()
	lease.held.Store(false)
	agent.LeaseLost()
	f.G.Consistently(func(g Gomega) {
		g.Expect(dp.flushCount()).To(Equal(flushes))
		g.Expect(dp.programmed(netip.MustParseAddr("192.0.2.41"))).NotTo(BeZero())
	}, quiet, 100*time.Millisecond).Should(Succeed())

	lease.held.Store(true)
	agent.Regained()
	onLease := f.attached("on-lease", "192.0.2.42", "10.244.1.42")
	f.G.Expect(f.attachedGeneration(onLease)()).To(BeZero())
	f.G.Expect(agent.Idle()).To(BeFalse(), "an IP held on the Lease")
	lease.held.Store(false)
	agent.LeaseLost()
	f.G.Expect(dp.flushCount()).To(Equal(flushes + 1))
	f.G.Expect(dp.programmed(netip.MustParseAddr("192.0.2.42"))).To(BeZero())
}

// Witnesses that never vouch (the witness port filtered) do not keep an
// address dark: after the fallback time the node holds it on its Lease,
// says so in an Event, and keeps that rule (no flapping back) while it
// holds it, even once the witnesses vouch.
func TestUnreachableWitnessesFallBackToTheLease(t *testing.T) {
	f := newFixture(t)
	w := f.witnessNode("w3", "192.0.2.93")
	pod := f.pod("fallback", thisNode, "10.244.1.43")
	ip := f.ip("fallback", "192.0.2.43", ipv1.IPStatus{Node: thisNode, Pod: pod, Witnesses: []string{w}})
	f.G.Consistently(f.attachedNode(ip), 2*time.Second, 100*time.Millisecond).Should(BeEmpty(), "claimed before the fallback time")
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(pod))
	f.G.Expect(f.attachedGeneration(ip)()).To(BeZero())
	f.G.Eventually(func() []eventsv1.Event { return ipEvents(f.Ctx, ip) }, testenv.WaitFor).Should(ContainElement(
		HaveField("Reason", ipv1.ReasonWitnessesUnreachable)))

	witnesses.vouch(w, true)
	f.G.Consistently(f.attachedGeneration(ip), quiet, 100*time.Millisecond).Should(BeZero())
}

// A hold that began on the Lease because the IP had no witnesses (none
// was eligible when it was placed) moves to their word once the
// controller names some and they vouch: the claim records the generation
// and keeps attachedPod. Before that claim can be read, the kernel's gate
// is already bound by the witnesses' word: from the claim on, the
// controller may move the address once they declare the node silent,
// long before the Lease would have ended.
func TestLeaseHoldMovesToWitnessesNamedLater(t *testing.T) {
	f := newFixture(t)
	w := f.witnessNode("w4", "192.0.2.94")
	ip := f.attached("late", "192.0.2.44", "10.244.1.44")
	pod := f.holder(ip)
	f.G.Expect(f.attachedGeneration(ip)()).To(BeZero())

	// What the gate would be set to at each Refresh, and whether the
	// claim was on the API server by then.
	leaseEnd := time.Now().Add(2 * time.Hour)
	type seen struct {
		Deadline time.Time
		Gen      int64
	}
	var mu sync.Mutex
	var refreshes []seen
	dp.setOnRefresh(func() {
		cur := &ipv1.IP{}
		if err := k8s.Get(f.Ctx, client.ObjectKey{Name: ip}, cur); err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		refreshes = append(refreshes, seen{agent.HoldDeadline(leaseEnd, 0), cur.Status.AttachedGeneration})
	})
	t.Cleanup(func() { dp.setOnRefresh(nil) })

	// Named, not vouching yet: still on the Lease, still attached.
	f.setWitnesses(ip, w)
	f.G.Eventually(witnesses.probing, testenv.WaitFor).Should(HaveKey(w))
	f.G.Consistently(func(g Gomega) {
		g.Expect(f.attachedGeneration(ip)()).To(BeZero())
		g.Expect(f.attachedPod(ip)()).To(Equal(pod))
		g.Expect(dp.programmed(netip.MustParseAddr("192.0.2.44"))).NotTo(BeZero())
	}, time.Second, 100*time.Millisecond).Should(Succeed())

	witnesses.vouch(w, true)
	f.G.Eventually(f.attachedGeneration(ip), testenv.WaitFor).Should(BeEquivalentTo(firstGen))
	f.G.Expect(f.attachedPod(ip)()).To(Equal(pod), "the conversion keeps the kernel's forwarding and says so")
	f.G.Expect(dp.programmed(netip.MustParseAddr("192.0.2.44"))).NotTo(BeZero())
	f.G.Expect(agent.Idle()).To(BeTrue(), "nothing left on the Lease")
	mu.Lock()
	defer mu.Unlock()
	bound := time.Now().Add(time.Hour) // the fake witnesses vouch for an hour
	f.G.Expect(refreshes).To(ContainElement(SatisfyAll(
		HaveField("Gen", BeZero()),
		HaveField("Deadline", BeTemporally("<=", bound)),
	)), "the gate was bound by the witnesses before the claim was written")
	f.G.Expect(dp.protocolViolations()).To(BeEmpty())
}

// A hold on the Lease whose witnesses, named later, never vouch stays on
// the Lease: attached throughout, and the fallback told once.
func TestLeaseHoldKeepsTheLeaseWhenLateWitnessesAreSilent(t *testing.T) {
	f := newFixture(t)
	w := f.witnessNode("w5", "192.0.2.95")
	ip := f.attached("late-silent", "192.0.2.45", "10.244.1.45")
	pod := f.holder(ip)
	f.setWitnesses(ip, w)
	f.G.Eventually(func() []eventsv1.Event { return ipEvents(f.Ctx, ip) }, testenv.WaitFor).Should(ContainElement(
		HaveField("Reason", ipv1.ReasonWitnessesUnreachable)))
	f.G.Expect(f.attachedGeneration(ip)()).To(BeZero())
	f.G.Expect(f.attachedPod(ip)()).To(Equal(pod))
	f.G.Expect(dp.programmed(netip.MustParseAddr("192.0.2.45"))).NotTo(BeZero())

	// Fallen back: no flapping to the witnesses' word when they vouch.
	witnesses.vouch(w, true)
	f.G.Consistently(f.attachedGeneration(ip), quiet, 100*time.Millisecond).Should(BeZero())
}

// setWitnesses names the IP's witnesses, as the controller does.
func (f *fixture) setWitnesses(name string, ws ...string) {
	f.T.Helper()
	ip := &ipv1.IP{}
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: name}, ip)).To(Succeed())
	orig := ip.DeepCopy()
	ip.Status.Witnesses = ws
	f.G.Expect(k8s.Status().Patch(f.Ctx, ip, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))).To(Succeed())
}

// A claim that waits for its witnesses is told as soon as they vouch
// (QuorumReached, which the witness run asks at every vouching answer and
// then pokes the agent): a node that already held IPs on its witnesses'
// word left a new IP's claim to its next requeue, up to 750 ms later.
func TestQuorumReachedTellsAWaitingClaim(t *testing.T) {
	f := newFixture(t)
	w := f.witnessNode("w5", "192.0.2.96")
	pod := f.pod("late", thisNode, "10.244.1.56")
	ip := f.ip("late", "192.0.2.56", ipv1.IPStatus{Node: thisNode, Pod: pod, Witnesses: []string{w}})
	f.G.Eventually(witnesses.probing, testenv.WaitFor).Should(HaveKey(w))
	f.G.Expect(agent.QuorumReached()).To(BeFalse(), "no witness vouches yet")
	f.G.Expect(f.attachedNode(ip)()).To(BeEmpty())

	// The answer arrives; the peer has not told the agent yet.
	witnesses.mu.Lock()
	witnesses.held[w] = true
	witnesses.mu.Unlock()
	t.Cleanup(func() {
		witnesses.mu.Lock()
		delete(witnesses.held, w)
		witnesses.mu.Unlock()
	})
	if !agent.QuorumReached() {
		// Only if a resync pass ran in between and took it.
		f.G.Eventually(f.attachedNode(ip), testenv.WaitFor).Should(Equal(thisNode), "the claim may go now")
	}
	agent.Poke()
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(pod))
	f.G.Eventually(agent.QuorumReached, testenv.WaitFor).Should(BeFalse(), "claimed: nothing waits")
}
