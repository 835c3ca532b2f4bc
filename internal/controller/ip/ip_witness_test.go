package ip

import (
	"slices"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/internal/witness"
	"github.com/kubext/kubext/test/testenv"
)

// witnessed makes IP name in a pool with failover Witness, held by a pod
// on a first node, a younger standby on a second, and a third node with
// only an agent; every agent holds in generation 7. It waits until the
// holder is attached on its witnesses' word.
func (f *fixture) witnessed(name, cidr string) (a, b, c string, agentA *fakeAgent) {
	f.T.Helper()
	pool := f.name("pool")
	f.Create(&ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: ipv1.IPPoolSpec{Addresses: []string{cidr},
		Claimants: &ipv1.PoolClaimants{Namespaces: []string{"default"}}, Failover: ipv1.FailoverWitness}})
	a, b, c = f.node(f.name("a")), f.node(f.name("b")), f.node(f.name("c"))
	agents := map[string]*fakeAgent{}
	for _, n := range []string{a, b, c} {
		agents[n] = startAgent(f.T, n)
		agents[n].mu.Lock()
		agents[n].gen = 7
		agents[n].mu.Unlock()
	}
	// The third node's agent renews before the IP is placed, so that it
	// can be named a witness.
	f.G.Eventually(func() bool { return reconciler.Health.Healthy(c) && reconciler.Health.Healthy(b) }, testenv.WaitFor).Should(BeTrue())
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	f.pod(f.name("first"), name, a, "192.0.2.21")
	f.G.Eventually(func(g Gomega) {
		ip := f.ip(name)
		g.Expect(ip.Status.AttachedPod).NotTo(BeEmpty())
		g.Expect(ip.Status.AttachedGeneration).To(BeEquivalentTo(7))
	}, testenv.WaitFor).Should(Succeed())
	time.Sleep(50 * time.Millisecond) // the second pod is younger: a standby
	f.pod(f.name("second"), name, b, "192.0.2.22")
	f.G.Eventually(func() []string { return f.ip(name).Status.Standbys }, testenv.WaitFor).Should(HaveLen(1))
	return a, b, c, agents[a]
}

// declare publishes, on witness w's heartbeat Lease, that w declared
// node's generation gen silent (what the witness's agent does).
func (f *fixture) declare(w, node string, gen witness.Gen) {
	f.T.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l := &coordinationv1.Lease{}
		if err := k8s.Get(f.Ctx, client.ObjectKey{Namespace: heartbeatNS, Name: heartbeat.LeaseName(ipv1.AgentComponent, w)}, l); err != nil {
			return err
		}
		decl, err := witness.ParseDeclared(l.Annotations[witness.AnnotationDeclared])
		if err != nil {
			return err
		}
		decl[node] = gen
		v, err := witness.FormatDeclared(decl)
		if err != nil {
			return err
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[witness.AnnotationDeclared] = v
		return k8s.Update(f.Ctx, l)
	})
	f.G.Expect(err).NotTo(HaveOccurred())
}

// A hold on the witnesses' word outlives its node's heartbeat: with the
// holder's agent gone and its Lease long expired, the address stays until
// the hold's witnesses have declared the hold's generation silent (a node
// that is not one of them, or a declaration of an older generation, does
// not count), and then moves to the standby. Two other nodes make one
// witness, the standby's: two of two would have to vouch.
func TestWitnessHoldMovesOnlyOnAQuorumOfDeclarations(t *testing.T) {
	f := newFixture(t)
	name := f.name("ip")
	a, b, c, agentA := f.witnessed(name, "203.0.113.32/29")
	ip := f.ip(name)
	f.G.Expect(ip.Status.Witnesses).To(Equal([]string{b}), "the standby's node, and an odd number")

	agentA.stop()
	// Three times the 1 s lease of the fake agents: under Lease failover
	// the address would have moved.
	f.G.Consistently(func() string { return f.ip(name).Status.AttachedNode }, 3*time.Second, 100*time.Millisecond).Should(Equal(a))
	f.declare(b, a, 6)
	f.declare(c, a, 7)
	f.G.Consistently(func() string { return f.ip(name).Status.AttachedNode }, time.Second, 100*time.Millisecond).Should(Equal(a))

	f.declare(b, a, 7)
	moved := f.readyAttachedOn(name, b)
	// The new hold's witness: not the old holder, which its witness
	// declared silent.
	f.G.Expect(moved.Status.Witnesses).To(Equal([]string{c}))
	f.G.Expect(moved.Status.AttachedGeneration).To(BeEquivalentTo(7))
	lost := f.eventOn(name, ipv1.ReasonNodeLost)
	f.G.Expect(lost.Note).To(ContainSubstring("witnesses of node " + a))
}

// A holder its witnesses declared silent has stopped answering, even if it
// still renews its heartbeat (cut off from its peers, not from the API
// server): the address moves without waiting for the Lease.
func TestWitnessDeclarationsEndAHoldWhoseLeaseRenews(t *testing.T) {
	f := newFixture(t)
	name := f.name("ip")
	a, b, _, _ := f.witnessed(name, "203.0.113.40/29")
	f.declare(b, a, 7)
	f.G.Expect(f.readyAttachedOn(name, b).Status.Node).To(Equal(b))
	f.G.Expect(reconciler.Health.Healthy(a)).To(BeTrue(), "the old holder's Lease still renews")
}

// Declarations are read as the witness's agent writes them: garbage, and
// a declaration on a Lease of another component, count for nothing.
func TestUnreadableDeclarationsCountForNothing(t *testing.T) {
	d := newDeclarations()
	node := "n1"
	lease := func(component, holder, decl string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: component + "-" + holder, Labels: map[string]string{heartbeat.LabelComponent: component},
				Annotations: map[string]string{witness.AnnotationDeclared: decl}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
		}
	}
	d.observe(lease(ipv1.AgentComponent, "w1", "n1=notanumber"))
	d.observe(lease("reboot-agent", "w2", node+"="+strconv.Itoa(9)))
	d.observe(lease(ipv1.AgentComponent, "w3", node+"=5"))
	d.observe(lease(ipv1.AgentComponent, "w3", node+"=4")) // never goes back
	g := NewWithT(t)
	g.Expect(d.get("w1", node)).To(BeZero())
	g.Expect(d.get("w2", node)).To(BeZero())
	g.Expect(d.get("w3", node)).To(BeEquivalentTo(5))
	g.Expect(witness.MayMove(witness.Hold{Node: node, Gen: 5}, []string{"w1", "w2", "w3"}, d.get)).To(BeFalse())
	g.Expect(witness.MayMove(witness.Hold{Node: node, Gen: 5}, []string{"w3"}, d.get)).To(BeTrue())
}

// Witnesses beyond the standbys follow the holder round the ring of node
// names: holders spread their witnesses over the cluster instead of all
// naming its first nodes.
func TestWitnessOrderFollowsTheHolder(t *testing.T) {
	nodes := func() []string { return []string{"n3", "n0", "n4", "n1", "n2"} }
	for _, c := range []struct {
		target string
		want   []string
	}{
		{"n0", []string{"n1", "n2", "n3", "n4", "n0"}},
		{"n3", []string{"n4", "n0", "n1", "n2", "n3"}},
		{"n4", []string{"n0", "n1", "n2", "n3", "n4"}},
		{"m", []string{"n0", "n1", "n2", "n3", "n4"}}, // not a node: from where it would be
	} {
		if got := ringAfter(c.target, nodes()); !slices.Equal(got, c.want) {
			t.Errorf("ringAfter(%s) = %v, want %v", c.target, got, c.want)
		}
	}
	// The first three after each holder: every node witnesses for three.
	count := map[string]int{}
	for _, h := range nodes() {
		for _, w := range witness.Choose(h, ringAfter(h, nodes()), maxWitnesses) {
			count[w]++
		}
	}
	for _, n := range nodes() {
		if count[n] != maxWitnesses {
			t.Errorf("%s witnesses for %d holders, want %d: %v", n, count[n], maxWitnesses, count)
		}
	}
}

// A hold that began without witnesses (no other node's agent renewed yet,
// as right after an install) is on its holder's Lease, so a stalled API
// server would silence it. The controller names its witnesses as soon as
// one is eligible, and the agent moves the hold to their word. Until the
// agent has done so the hold is judged by its Lease alone: its witnesses'
// declarations cannot end it.
func TestWitnessesNamedForAHoldThatHadNone(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.Create(&ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: ipv1.IPPoolSpec{Addresses: []string{"203.0.113.48/29"},
		Claimants: &ipv1.PoolClaimants{Namespaces: []string{"default"}}, Failover: ipv1.FailoverWitness,
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"late": f.ID}}}})
	a, b := f.name("a"), f.name("b")
	for _, n := range []string{a, b} {
		f.Create(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"late": f.ID}}})
	}
	agentA := startAgent(t, a)
	agentA.mu.Lock()
	agentA.gen = 7
	agentA.mu.Unlock()
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	f.pod(f.name("holder"), name, a, "192.0.2.23")
	held := f.readyAttachedOn(name, a)
	f.G.Expect(held.Status.Witnesses).To(BeEmpty(), "no other node's agent renews")
	f.G.Expect(held.Status.AttachedGeneration).To(BeZero(), "held on the Lease")

	// b's agent starts; a's agent does not take the witnesses' word yet.
	agentA.noClaim.Store(true)
	agentB := startAgent(t, b)
	agentB.mu.Lock()
	agentB.gen = 3
	agentB.mu.Unlock()
	// Named when b's agent turns healthy, not at the next retry.
	f.G.Eventually(func() []string { return f.ip(name).Status.Witnesses }, testenv.WaitFor).Should(Equal([]string{b}))
	f.declare(b, a, 7)
	f.G.Consistently(func(g Gomega) {
		ip := f.ip(name)
		g.Expect(ip.Status.AttachedNode).To(Equal(a))
		g.Expect(ip.Status.Node).To(Equal(a))
		g.Expect(ip.Status.Witnesses).To(Equal([]string{b}))
	}, 2*time.Second, 100*time.Millisecond).Should(Succeed(), "declarations end only a hold on the witnesses' word")

	// a's agent takes their word, in generation 7: now the declaration
	// made above ends the hold.
	agentA.noClaim.Store(false)
	f.G.Eventually(func() string { return f.ip(name).Status.AttachedNode }, testenv.WaitFor).Should(BeEmpty())
	lost := f.eventOn(name, ipv1.ReasonNodeLost)
	f.G.Expect(lost.Note).To(ContainSubstring("witnesses of node " + a))
}
