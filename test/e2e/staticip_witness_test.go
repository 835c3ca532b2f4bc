package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/nftables"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/staticip"
)

// A pool with failover Witness: the holder keeps its address on its
// witnesses' word, so a stalled API server silences nothing and moves
// nothing; when the holder's node dies, its witnesses declare it silent and
// the standby answers, without waiting for any Lease; the dead node, back,
// stays silent. The split detector watches the address throughout.
func TestStaticIPWitnessFailover(t *testing.T) {
	s := staticIP(t)
	g := NewWithT(t)
	ctx := context.Background()
	addr := netip.MustParseAddr("203.0.113.114")
	staticip.WatchSplits(t, theLab.Net, addr)

	s.witnessPool(t, g, "e2e-witness", "203.0.113.112/29", "witnessed", addr)

	var holder, standby, holderNode string
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, "witnessed")
		g.Expect(staticip.Ready(ip)).To(BeTrue(), "IP not Ready: %v", ip.Status.Conditions)
		g.Expect(ip.Status.Standbys).To(HaveLen(1))
		g.Expect(ip.Status.Witnesses).NotTo(BeEmpty())
		g.Expect(ip.Status.Witnesses).NotTo(ContainElement(ip.Status.Node))
		g.Expect(ip.Status.AttachedGeneration).To(BeNumerically(">", 0), "held on the Lease, not on the witnesses")
		holder, standby, holderNode = staticip.PodName(ip.Status.Pod), staticip.PodName(ip.Status.Standbys[0]), ip.Status.Node
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	client := theLab.Net.ClientNamespace()
	g.Eventually(func() (string, error) { return staticip.AskFrom(client, addr, time.Second) }, 20*time.Second, 100*time.Millisecond).Should(Equal(holder))

	// The API server stalls for 5 s, far past the agents' 2 s Lease: the
	// holder keeps answering every probe, and nothing moves.
	resume, err := theLab.PauseComponent("kube-apiserver", 20*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	stallEnd := time.Now().Add(5 * time.Second)
	missed, asked := 0, 0
	for time.Now().Before(stallEnd) {
		asked++
		if got, err := staticip.AskFrom(client, addr, 300*time.Millisecond); err != nil || got != holder {
			missed++
			t.Logf("during the stall, at %s: %q %v", time.Now().UTC().Format("15:04:05.000"), got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	g.Expect(resume()).To(Succeed())
	t.Logf("API server stalled 5 s: %d of %d probes unanswered", missed, asked)
	// The manager could not renew its leader Lease and exited, as it does
	// in a cluster, where the kubelet restarts it; so does the test.
	g.Expect(s.restartManagerIfExited(ctx)).To(Succeed())
	g.Expect(missed).To(BeZero(), "the holder stopped answering while the API server stalled")
	g.Consistently(func(g Gomega) {
		g.Expect(staticip.AskFrom(client, addr, time.Second)).To(Equal(holder))
		g.Expect(answersOn(addr)).To(Equal([]string{holderNode}))
	}, 3*time.Second, 250*time.Millisecond).Should(Succeed())

	// The holder's node dies: its witnesses declare it silent, and the
	// standby answers.
	g.Expect(theLab.KillNode(ctx, holderNode)).To(Succeed())
	start := time.Now()
	g.Eventually(func() (string, error) {
		return staticip.AskFrom(client, addr, 100*time.Millisecond)
	}, 30*time.Second, 20*time.Millisecond).Should(Equal(standby))
	t.Logf("the standby answered %s after the holder's node was killed", time.Since(start).Round(10*time.Millisecond))
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, "witnessed")
		g.Expect(staticip.PodName(ip.Status.Pod)).To(Equal(standby))
		g.Expect(staticip.Ready(ip)).To(BeTrue())
		g.Expect(ip.Status.AttachedGeneration).To(BeNumerically(">", 0))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	// Back, with a new agent: it must not answer.
	g.Expect(theLab.ReviveNode(ctx, holderNode)).To(Succeed())
	agent, err := theLab.StartIPAgent(ctx, holderNode, witnessArgs...)
	g.Expect(err).NotTo(HaveOccurred())
	s.agents[holderNode] = agent
	g.Consistently(func(g Gomega) {
		g.Expect(answersOn(addr)).To(Equal([]string{theNodeOf(g, s, "witnessed")}))
		g.Expect(staticip.AskFrom(client, addr, time.Second)).To(Equal(standby))
	}, 3*time.Second, 250*time.Millisecond).Should(Succeed())
}

// The holder's agent frozen (a stuck process on a healthy node) in a
// Witness pool: its witnesses stop hearing it and declare it silent, the
// address moves to the standby, and the frozen node's kernel has let go of
// the address by then (the hold's deadline), so the split detector never
// sees two nodes; woken up, the agent learns its generation was declared
// silent and answers for nothing it no longer holds.
func TestStaticIPWitnessFrozenAgent(t *testing.T) {
	s := staticIP(t)
	g := NewWithT(t)
	addr := netip.MustParseAddr("203.0.113.115")
	staticip.WatchSplits(t, theLab.Net, addr)
	s.witnessPool(t, g, "e2e-witness-frozen", "203.0.113.115/32", "witness-frozen", addr)
	before := s.waitReady(g, "witness-frozen", 1)
	g.Expect(before.Status.AttachedGeneration).To(BeNumerically(">", 0))
	frozenNode, standby := before.Status.Node, staticip.PodName(before.Status.Standbys[0])
	client := theLab.Net.ClientNamespace()
	g.Eventually(func() (string, error) { return staticip.AskFrom(client, addr, time.Second) },
		20*time.Second, 100*time.Millisecond).Should(Equal(staticip.PodName(before.Status.Pod)))

	froze := time.Now()
	resume := s.freezeAsync(t, s.agents[frozenNode])
	g.Eventually(func() (string, error) { return staticip.AskFrom(client, addr, 100*time.Millisecond) },
		30*time.Second, 20*time.Millisecond).Should(Equal(standby))
	t.Logf("the standby answered %s after the holder's agent froze", time.Since(froze).Round(10*time.Millisecond))
	// The address may still be on the frozen node's interface (its
	// lifetime is the backstop), but the hold gate has silenced it there:
	// the split detector sees no frame from it as the address.
	g.Expect(nftHeld(frozenNode, addr)).To(BeFalse(), "the frozen node's hold gate still holds %s", addr)
	time.Sleep(time.Until(froze.Add(5 * time.Second)))
	resume()
	g.Eventually(func() []string { return answersOn(addr) }, 10*time.Second, 100*time.Millisecond).
		Should(Equal([]string{s.ip(g, "witness-frozen").Status.Node}), "the woken agent takes the address off its node")
	g.Consistently(func(g Gomega) {
		now := s.ip(g, "witness-frozen")
		g.Expect(now.Status.Node).NotTo(Equal(frozenNode))
		g.Expect(answersOn(addr)).To(Equal([]string{now.Status.Node}))
		g.Expect(staticip.AskFrom(client, addr, time.Second)).To(Equal(standby))
	}, 3*time.Second, 250*time.Millisecond).Should(Succeed())
}

func theNodeOf(g Gomega, s *staticIPStack, name string) string {
	return s.ip(g, name).Status.Node
}

// restartManagerIfExited starts the manager again if it exited (it leaves
// when it loses its leader Lease), as the kubelet would.
func (s *staticIPStack) restartManagerIfExited(ctx context.Context) error {
	if s.manager.Running() {
		return nil
	}
	m, err := theLab.StartManager(ctx, fmt.Sprintf("manager-%d", time.Now().UnixNano()), managerArgs...)
	if err != nil {
		return err
	}
	s.manager = m
	return nil
}

// nftHeld reports whether kubext's hold gate on node holds addr (its held
// element exists and has not expired); no table holds nothing.
func nftHeld(node string, addr netip.Addr) bool {
	elems, err := nftElements(node, "held4")
	return err == nil && slices.ContainsFunc(elems, func(e nftables.SetElement) bool { return bytes.Equal(e.Key, addr.AsSlice()) })
}

// witnessPool creates a pool with Witness failover, an IP named name for
// addr in it, and a 2-replica Deployment claiming it (holder and standby),
// removed when the test ends.
func (s *staticIPStack) witnessPool(t *testing.T, g Gomega, pool, cidr, name string, addr netip.Addr) {
	ctx := context.Background()
	p := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: ipv1.IPPoolSpec{
		Addresses: []string{cidr}, Claimants: defaultClaimants(), Failover: ipv1.FailoverWitness}}
	g.Expect(s.c.Create(ctx, p)).To(Succeed())
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Address: addr.String()}}
	g.Expect(s.c.Create(ctx, ip)).To(Succeed())
	dep := staticip.Deployment(name+"-app", name, 2)
	g.Expect(s.c.Create(ctx, dep)).To(Succeed())
	t.Cleanup(func() {
		_ = s.c.Delete(ctx, dep)
		_ = s.c.Delete(ctx, ip)
		_ = s.c.Delete(ctx, p)
	})
	s.reportDataPathOnFailure(t, name)
}
