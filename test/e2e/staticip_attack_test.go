package e2e

// Static IPs under attack and faults (issue 9): a pod that may not claim,
// a controller with a stale view, a frozen agent, deletions that would free
// an address a node still answers for, and inputs a node cannot answer
// for. Every test that attaches an address runs the split detector on it.

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/staticip"
	"github.com/kubext/kubext/test/testenv"
)

// The detector itself: two nodes holding an address are seen both ways
// (configured, and both answering the probe), one node is not a split.
func TestStaticIPSplitDetectorSeesTwoNodes(t *testing.T) {
	rootOnly(t)
	g := NewWithT(t)
	addr := netip.MustParseAddr("203.0.113.150") // in no pool
	one, two := theLab.Nodes[0], theLab.Nodes[1]
	t.Cleanup(func() { delAddr(one, addr); delAddr(two, addr) })

	d, err := staticip.NewSplitDetector(theLab.Net, addr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(addAddr(one, addr)).To(Succeed())
	time.Sleep(300 * time.Millisecond)
	splits, err := d.Stop()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(splits).To(BeEmpty(), "one node is not a split")
	g.Expect(d.Senders()).To(HaveKeyWithValue(one, BeNumerically(">", 10)), "the holder answers the probes")

	d, err = staticip.NewSplitDetector(theLab.Net, addr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(addAddr(two, addr)).To(Succeed())
	time.Sleep(300 * time.Millisecond)
	delAddr(two, addr)
	splits, err = d.Stop()
	g.Expect(err).NotTo(HaveOccurred())
	t.Log(d.Report())
	kinds := map[string]bool{}
	for _, s := range splits {
		g.Expect(s.Nodes).To(ConsistOf(one, two))
		kinds[s.Kind] = true
	}
	g.Expect(kinds).To(HaveKey("configured"))
	g.Expect(kinds).To(HaveKey("sending"))
	// split_brain_ms of the benchmarks: about the 300 ms both held it.
	g.Expect(d.SplitTime()).To(BeNumerically("~", 300*time.Millisecond, 150*time.Millisecond))
}

func addAddr(node string, addr netip.Addr) error {
	h, err := nodeHandle(node)
	if err != nil {
		return err
	}
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	return h.AddrAdd(eth0, &netlink.Addr{IPNet: netlink.NewIPNet(addr.AsSlice())})
}

func delAddr(node string, addr netip.Addr) {
	h, err := nodeHandle(node)
	if err != nil {
		return
	}
	defer h.Close()
	if eth0, err := h.LinkByName("eth0"); err == nil {
		_ = h.AddrDel(eth0, &netlink.Addr{IPNet: netlink.NewIPNet(addr.AsSlice())})
	}
}

func nodeHandle(node string) (*netlink.Handle, error) {
	ns, err := netns.GetFromName(theLab.Net.NodeNamespace(node))
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns)
}

// A pod in another namespace that claimed the IP before anyone else (its
// annotation was there before the IP and its rightful pods) never holds it
// and is never a standby; it is told why with a ClaimRefused Event.
func TestStaticIPAttackClaimFromOtherNamespace(t *testing.T) {
	s := staticIP(t)
	g := NewWithT(t)
	ctx := context.Background()
	addr := netip.MustParseAddr("203.0.113.102")
	staticip.WatchSplits(t, theLab.Net, addr)
	s.ensureE2EPool(g)
	g.Expect(theLab.EnsureNamespace(ctx, "intruder")).To(Succeed())

	intruder := staticip.DeploymentIn("intruder", "intruder", "guarded", 1)
	g.Expect(s.c.Create(ctx, intruder)).To(Succeed())
	t.Cleanup(func() { _ = s.c.Delete(ctx, intruder) })
	intruderPod := s.runningPod(g, "intruder", "intruder")

	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "guarded"}, Spec: ipv1.IPSpec{Address: addr.String()}}
	g.Expect(s.c.Create(ctx, ip)).To(Succeed())
	t.Cleanup(func() { _ = s.c.Delete(ctx, ip) })
	seen := s.recordIP(t, "guarded")

	// Only the intruder claims: nobody may hold it, and the IP says so.
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, "guarded")
		c := meta.FindStatusCondition(ip.Status.Conditions, ipv1.ConditionAttached)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(ipv1.ReasonNoAllowedClaimant))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Eventually(func() ([]corev1.Event, error) { return refusals(ctx, "intruder", intruderPod) },
		30*time.Second, 250*time.Millisecond).ShouldNot(BeEmpty(), "a ClaimRefused Event on the intruder pod")
	ev, _ := refusals(ctx, "intruder", intruderPod)
	t.Logf("event on intruder/%s: %s %s: %s", intruderPod, ev[0].Type, ev[0].Reason, ev[0].Message)
	g.Expect(ev[0].Type).To(Equal(corev1.EventTypeWarning))

	// The rightful pod comes later, and holds it alone.
	dep := staticip.Deployment("guarded-app", "guarded", 1)
	g.Expect(s.c.Create(ctx, dep)).To(Succeed())
	t.Cleanup(func() { _ = s.c.Delete(ctx, dep) })
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, "guarded")
		g.Expect(staticip.Ready(ip)).To(BeTrue(), "%v", ip.Status.Conditions)
		g.Expect(ip.Status.Pod).To(HavePrefix("default/guarded-app-"))
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	holder := staticip.PodName(s.ip(g, "guarded").Status.Pod)
	g.Eventually(func() (string, error) { return staticip.AskFrom(theLab.Net.ClientNamespace(), addr, time.Second) },
		20*time.Second, 100*time.Millisecond).Should(Equal(holder))
	time.Sleep(2 * time.Second)
	for _, st := range seen() {
		g.Expect(st.Pod).NotTo(HavePrefix("intruder/"), "the intruder held the IP at some point")
		g.Expect(st.AttachedPod).NotTo(HavePrefix("intruder/"))
		for _, sb := range st.Standbys {
			g.Expect(sb).NotTo(HavePrefix("intruder/"), "the intruder was a standby at some point")
		}
	}
	t.Logf("%d status versions seen, none naming the intruder", len(seen()))
}

// A controller with a stale view must not move an address: the holder's
// heartbeat Lease deleted (unknown, not dead), then the manager frozen for
// 3 s so that every Lease it cached looks expired when it wakes. No move,
// no split, no pod deleted, with or without --ip-delete-stale-pods.
func TestStaticIPAttackStaleView(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		addr string
	}{
		{"default", nil, "203.0.113.103"},
		{"delete-stale-pods", []string{"--ip-delete-stale-pods"}, "203.0.113.108"},
	} {
		t.Run(tc.name, func(t *testing.T) { staleView(t, tc.args, netip.MustParseAddr(tc.addr)) })
	}
}

func staleView(t *testing.T, extra []string, addr netip.Addr) {
	s := staticIP(t)
	g := NewWithT(t)
	ctx := context.Background()
	// A manager that keeps its leadership across a 3 s freeze (the package
	// one gives it up after 3 s and exits), so that what is tested is the
	// stale view, not a new leader.
	s.replaceManager(t, append([]string{"--controllers=ip,ippool", "--leader-elect-lease-duration=15s",
		"--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=500ms"}, extra...))
	staticip.WatchSplits(t, theLab.Net, addr)
	s.ensureE2EPool(g)
	name := "stale-" + strings.ReplaceAll(addr.String(), ".", "-")
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Address: addr.String()}}
	g.Expect(s.c.Create(ctx, ip)).To(Succeed())
	dep := staticip.Deployment(name+"-app", name, 2)
	g.Expect(s.c.Create(ctx, dep)).To(Succeed())
	t.Cleanup(func() {
		_ = s.c.Delete(ctx, dep)
		_ = s.c.Delete(ctx, ip)
	})
	before := s.waitReady(g, name, 1)
	pods := s.podUIDs(g, name+"-app")
	g.Expect(pods).To(HaveLen(2))
	g.Eventually(func() (string, error) { return staticip.AskFrom(theLab.Net.ClientNamespace(), addr, time.Second) },
		20*time.Second, 100*time.Millisecond).Should(Equal(staticip.PodName(before.Status.Pod)))
	seen := s.recordIP(t, name)

	unchanged := func(g Gomega) {
		now := s.ip(g, name)
		g.Expect(now.Status.Node).To(Equal(before.Status.Node))
		g.Expect(now.Status.Pod).To(Equal(before.Status.Pod))
		g.Expect(now.Status.LastMoveTime).To(Equal(before.Status.LastMoveTime))
		g.Expect(s.podUIDs(g, name+"-app")).To(Equal(pods), "a pod was deleted")
	}

	cs, err := theLab.Clientset()
	g.Expect(err).NotTo(HaveOccurred())
	lease := "ip-agent-" + before.Status.Node
	g.Expect(cs.CoordinationV1().Leases(lab.SystemNamespace).Delete(ctx, lease, metav1.DeleteOptions{})).To(Succeed())
	t.Logf("deleted Lease %s", lease)
	g.Consistently(unchanged, 5*time.Second, 100*time.Millisecond).Should(Succeed(), "after the Lease was deleted")

	stopped := time.Now()
	s.freeze(t, s.manager.Process, 3*time.Second)
	t.Logf("manager frozen for %s", time.Since(stopped).Round(time.Millisecond))
	g.Consistently(unchanged, 8*time.Second, 100*time.Millisecond).Should(Succeed(), "after the manager woke")
	g.Expect(s.manager.Running()).To(BeTrue(), "the manager survived its freeze")
	for _, st := range seen() {
		g.Expect(st.Node).To(Equal(before.Status.Node), "status.node changed at some point: %+v", st)
		g.Expect(st.Pod).To(Equal(before.Status.Pod), "status.pod changed at some point: %+v", st)
	}
	g.Eventually(func() (string, error) { return staticip.AskFrom(theLab.Net.ClientNamespace(), addr, time.Second) },
		20*time.Second, 100*time.Millisecond).Should(Equal(staticip.PodName(before.Status.Pod)))
}

// The holder's agent frozen for 6 s (a stuck process, its node healthy):
// its kernel drops the address and its translations by themselves, so the
// partner never sees two nodes sending as the address; a new pod that gets
// the old holder's pod IP meanwhile does not leave as the static IP.
func TestStaticIPAttackFrozenAgent(t *testing.T) {
	s := staticIP(t)
	g := NewWithT(t)
	ctx := context.Background()
	addr := netip.MustParseAddr("203.0.113.104")
	splits := staticip.WatchSplits(t, theLab.Net, addr)
	s.ensureE2EPool(g)
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "frozen"}, Spec: ipv1.IPSpec{Address: addr.String()}}
	g.Expect(s.c.Create(ctx, ip)).To(Succeed())
	dep := staticip.Deployment("frozen-app", "frozen", 2)
	g.Expect(s.c.Create(ctx, dep)).To(Succeed())
	t.Cleanup(func() {
		_ = s.c.Delete(ctx, dep)
		_ = s.c.Delete(ctx, ip)
	})
	before := s.waitReady(g, "frozen", 1)
	frozenNode := before.Status.Node
	g.Eventually(func() (string, error) { return staticip.AskFrom(theLab.Net.ClientNamespace(), addr, time.Second) },
		20*time.Second, 100*time.Millisecond).Should(Equal(staticip.PodName(before.Status.Pod)))
	holder := &corev1.Pod{}
	g.Expect(s.c.Get(ctx, podKey(before.Status.Pod), holder)).To(Succeed())
	oldPodIP := netip.MustParseAddr(holder.Status.PodIP)
	g.Expect(nftHolds(frozenNode, addr)).To(BeTrue(), "the holder's node translates for the address")

	const lifetime = 2 * time.Second // the ip-agent's default --lease-duration
	froze := time.Now()
	resume := s.freezeAsync(t, s.agents[frozenNode])
	t.Logf("froze the agent of %s (holder %s) at %s", frozenNode, before.Status.Pod, froze.UTC().Format("15:04:05.000"))
	resumed := time.AfterFunc(6*time.Second, resume)

	// Meanwhile the holder pod goes and a new pod on the frozen node gets
	// its pod IP. kwok hands a freed pod IP to the next pod of its node, so
	// the node is cordoned first: the Deployment's replacement lands
	// elsewhere and the reuser below is the only pod with that IP.
	cordon(t, g, s.c, frozenNode)
	g.Expect(s.c.Delete(ctx, holder, client.GracePeriodSeconds(0))).To(Succeed())
	reuser := s.reusePodIP(t, g, frozenNode, before.Status.Pod, oldPodIP)

	// After the lifetime (the kernel checks lifetimes about once a second),
	// nothing of the address is left on the frozen node.
	time.Sleep(time.Until(froze.Add(lifetime + 1500*time.Millisecond)))
	g.Expect(answersOn(addr)).NotTo(ContainElement(frozenNode), "the address outlived its lifetime on the frozen node")
	g.Expect(nftHolds(frozenNode, addr)).To(BeFalse(), "table inet kubext on the frozen node still translates for %s", addr)
	g.Expect(time.Since(froze)).To(BeNumerically("<", 6*time.Second), "the lab was too slow: the egress check would start after the agent resumed")
	src, err := staticip.SourceSeenFrom(theLab, reuser)
	t.Logf("a new pod with the old holder's pod IP %s on the frozen node connected: the client saw %q (%v)", oldPodIP, src, err)
	g.Expect(src).NotTo(Equal(addr.String()), "a new pod with the old holder's pod IP left as the static IP")

	if resumed.Stop() {
		resume()
	}
	t.Logf("agent of %s resumed; %s since it froze", frozenNode, time.Since(froze).Round(time.Millisecond))
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, "frozen")
		g.Expect(staticip.Ready(ip)).To(BeTrue())
		g.Expect(answersOn(addr)).To(Equal([]string{ip.Status.Node}))
		g.Expect(staticip.AskFrom(theLab.Net.ClientNamespace(), addr, time.Second)).To(Equal(staticip.PodName(ip.Status.Pod)))
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	// Nor when it wakes: what it had scheduled (an announcement, a
	// refresh) must not speak for an address it lost.
	time.Sleep(2 * time.Second)
	now := s.ip(g, "frozen")
	t.Logf("frames sent as %s by node: %v; IP now on %s, moved at %v", addr, splits.Senders(), now.Status.Node, now.Status.LastMoveTime)
	if now.Status.Node != frozenNode {
		last, kind := splits.LastSent(frozenNode)
		g.Expect(last.Before(froze.Add(lifetime+1500*time.Millisecond))).To(BeTrue(),
			"the frozen node sent as %s (%s) at %s, %s after it froze (it resumed after 6 s)", addr, kind, last.UTC().Format("15:04:05.000"), last.Sub(froze))
	}
}

// Deleting the reservation (kubectl delete ipaddress) or the IP in the
// foreground never frees the address while a node may still answer for
// it: an IP for the same address claimed on another node gets it only
// after, and the two nodes never answer at once.
func TestStaticIPAttackForegroundDelete(t *testing.T) {
	s := staticIP(t)
	g := NewWithT(t)
	ctx := context.Background()
	addr := netip.MustParseAddr("203.0.113.106")
	staticip.WatchSplits(t, theLab.Net, addr)
	s.ensureE2EPool(g)
	first, second := theLab.Nodes[0], theLab.Nodes[1]

	old := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "fg-old"}, Spec: ipv1.IPSpec{Address: addr.String()}}
	g.Expect(s.c.Create(ctx, old)).To(Succeed())
	oldDep := pinned(staticip.Deployment("fg-old-app", "fg-old", 1), first)
	g.Expect(s.c.Create(ctx, oldDep)).To(Succeed())
	t.Cleanup(func() {
		_ = s.c.Delete(ctx, oldDep)
		_ = s.c.Delete(ctx, old)
	})
	s.waitReady(g, "fg-old", 0)

	// The reservation deleted under the IP: it stays (a finalizer) and the
	// address is not handed to anyone else.
	_, err := theLab.Kubectl(ctx, "delete", "ipaddresses.networking.k8s.io", addr.String(), "--wait=false")
	g.Expect(err).NotTo(HaveOccurred())
	fresh := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "fg-new"}, Spec: ipv1.IPSpec{Address: addr.String()}}
	g.Expect(s.c.Create(ctx, fresh)).To(Succeed())
	freshDep := pinned(staticip.Deployment("fg-new-app", "fg-new", 1), second)
	g.Expect(s.c.Create(ctx, freshDep)).To(Succeed())
	t.Cleanup(func() {
		_ = s.c.Delete(ctx, freshDep)
		_ = s.c.Delete(ctx, fresh)
	})
	g.Consistently(func(g Gomega) {
		g.Expect(meta.IsStatusConditionTrue(s.ip(g, "fg-new").Status.Conditions, ipv1.ConditionAllocated)).To(BeFalse(),
			"fg-new got the address while fg-old holds it")
		g.Expect(staticip.Ready(s.ip(g, "fg-old"))).To(BeTrue())
		a := &networkingv1.IPAddress{}
		g.Expect(s.c.Get(ctx, client.ObjectKey{Name: addr.String()}, a)).To(Succeed(), "the reservation is gone")
	}, 5*time.Second, 100*time.Millisecond).Should(Succeed())

	// The IP deleted in the foreground: the new one gets the address, on
	// the other node, only once the old node let go.
	_, err = theLab.Kubectl(ctx, "delete", "ips.ip.kubext.io", "fg-old", "--cascade=foreground", "--wait=false")
	g.Expect(err).NotTo(HaveOccurred())
	deleted := time.Now()
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, "fg-new")
		g.Expect(staticip.Ready(ip)).To(BeTrue(), "%v", ip.Status.Conditions)
		g.Expect(ip.Status.Node).To(Equal(second))
		g.Expect(answersOn(addr)).To(Equal([]string{second}))
		g.Expect(staticip.AskFrom(theLab.Net.ClientNamespace(), addr, time.Second)).To(Equal(staticip.PodName(ip.Status.Pod)))
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	t.Logf("fg-new answered on %s %s after fg-old's foreground delete", second, time.Since(deleted).Round(10*time.Millisecond))
	g.Eventually(func() bool {
		return apierrors.IsNotFound(s.c.Get(ctx, client.ObjectKey{Name: "fg-old"}, &ipv1.IP{}))
	}, 30*time.Second, 200*time.Millisecond).Should(BeTrue(), "fg-old deleted")
}

// An IP refused for a cause that goes away is allocated within 10 s:
// AddressInUse once the address is freed, PoolNotFound once the pool
// exists (named by spec.pool, or containing spec.address).
func TestStaticIPAttackRetriesWhenCauseGoes(t *testing.T) {
	s := staticIP(t)
	g := NewWithT(t)
	ctx := context.Background()
	s.ensureE2EPool(g)
	reason := func(name string) func(g Gomega) string {
		return func(g Gomega) string {
			c := meta.FindStatusCondition(s.ip(g, name).Status.Conditions, ipv1.ConditionAllocated)
			g.Expect(c).NotTo(BeNil())
			return c.Reason
		}
	}
	create := func(ip *ipv1.IP) {
		g.Expect(s.c.Create(ctx, ip)).To(Succeed())
		t.Cleanup(func() { _ = s.c.Delete(ctx, ip) })
	}
	allocatedWithin := func(name string, since time.Time) {
		t.Helper()
		g.Eventually(reason(name), 10*time.Second, 50*time.Millisecond).Should(Equal(ipv1.ReasonAddressAllocated))
		t.Logf("%s allocated %s after its cause went away", name, time.Since(since).Round(10*time.Millisecond))
	}

	create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "inuse-first"}, Spec: ipv1.IPSpec{Address: "203.0.113.107"}})
	g.Eventually(reason("inuse-first"), 30*time.Second, 100*time.Millisecond).Should(Equal(ipv1.ReasonAddressAllocated))
	create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "inuse-second"}, Spec: ipv1.IPSpec{Address: "203.0.113.107"}})
	create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "nopool-named"}, Spec: ipv1.IPSpec{Pool: "e2e-later"}})
	create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "nopool-address"}, Spec: ipv1.IPSpec{Address: "203.0.113.130"}})
	g.Eventually(reason("inuse-second"), 30*time.Second, 100*time.Millisecond).Should(Equal(ipv1.ReasonAddressInUse))
	g.Eventually(reason("nopool-named"), 30*time.Second, 100*time.Millisecond).Should(Equal(ipv1.ReasonPoolNotFound))
	g.Eventually(reason("nopool-address"), 30*time.Second, 100*time.Millisecond).Should(Equal(ipv1.ReasonPoolNotFound))
	// Long enough for any retry the refusal itself scheduled to have passed.
	time.Sleep(3 * time.Second)

	g.Expect(s.c.Delete(ctx, &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "inuse-first"}})).To(Succeed())
	// Released: gone, or already inuse-second's (its retry may come
	// before any poll here sees the gap).
	g.Eventually(func() bool {
		a := &networkingv1.IPAddress{}
		err := s.c.Get(ctx, client.ObjectKey{Name: "203.0.113.107"}, a)
		return apierrors.IsNotFound(err) || err == nil && a.Spec.ParentRef != nil && a.Spec.ParentRef.Name != "inuse-first"
	}, 30*time.Second, 20*time.Millisecond).Should(BeTrue(), "inuse-first's reservation released")
	allocatedWithin("inuse-second", time.Now())

	for _, p := range []*ipv1.IPPool{
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-later"}, Spec: ipv1.IPPoolSpec{Addresses: []string{"203.0.113.120/30"}, Claimants: defaultClaimants()}},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-later-address"}, Spec: ipv1.IPPoolSpec{Addresses: []string{"203.0.113.128/29"}, Claimants: defaultClaimants()}},
	} {
		g.Expect(s.c.Create(ctx, p)).To(Succeed())
		t.Cleanup(func() { _ = s.c.Delete(ctx, p) })
	}
	created := time.Now()
	allocatedWithin("nopool-named", created)
	allocatedWithin("nopool-address", created)
}

// What a node cannot answer for is refused by the API server with a
// message saying why; what it cannot attach is reported by a condition.
func TestStaticIPAttackBadInputs(t *testing.T) {
	s := staticIP(t)
	ctx := context.Background()
	const badAddress = "spec.address must be a unicast address a node can answer for"
	const badPool = "each entry of spec.addresses must hold only unicast addresses a node can answer for"
	for i, a := range []string{"127.0.0.1", "0.0.0.0", "169.254.1.1", "224.0.0.1", "255.255.255.255", "::1", "::", "fe80::1", "ff02::1"} {
		t.Run("ip "+a, func(t *testing.T) {
			ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bad-%d", i)}, Spec: ipv1.IPSpec{Address: a}}
			err := s.c.Create(ctx, ip)
			if err == nil {
				_ = s.c.Delete(ctx, ip)
			}
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(badAddress)))
		})
	}
	for _, cidr := range []string{"::/0", "0.0.0.0/0", "127.0.0.0/8", "198.18.0.0/15", "169.254.0.0/16", "224.0.0.0/4", "fe80::/64", "ff00::/8"} {
		t.Run("pool "+cidr, func(t *testing.T) {
			pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "bad-pool"},
				Spec: ipv1.IPPoolSpec{Addresses: []string{cidr}, Claimants: defaultClaimants()}}
			err := s.c.Create(ctx, pool)
			if err == nil {
				_ = s.c.Delete(ctx, pool)
			}
			g := NewWithT(t)
			if cidr == "198.18.0.0/15" { // unicast: accepted, the control case
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(badPool)))
		})
	}
	t.Run("pool claimants empty", func(t *testing.T) {
		err := s.c.Create(ctx, &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "bad-claimants"},
			Spec: ipv1.IPPoolSpec{Addresses: []string{"192.0.2.0/28"}, Claimants: &ipv1.PoolClaimants{}}})
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring("spec.claimants needs namespaces, namespaceSelector or podSelector")))
	})

	t.Run("aws pool", func(t *testing.T) {
		g := NewWithT(t)
		pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "e2e-aws"},
			Spec: ipv1.IPPoolSpec{Addresses: []string{"192.0.2.16/28"}, Provider: ipv1.Provider("aws"), Claimants: defaultClaimants()}}
		g.Expect(s.c.Create(ctx, pool)).To(Succeed())
		ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "on-aws"}, Spec: ipv1.IPSpec{Pool: "e2e-aws"}}
		g.Expect(s.c.Create(ctx, ip)).To(Succeed())
		dep := staticip.Deployment("on-aws-app", "on-aws", 1)
		g.Expect(s.c.Create(ctx, dep)).To(Succeed())
		t.Cleanup(func() {
			_ = s.c.Delete(ctx, dep)
			_ = s.c.Delete(ctx, ip)
			_ = s.c.Delete(ctx, pool)
		})
		s.expectNotAttached(g, "on-aws", ipv1.ReasonNotSupported, "")
	})

	t.Run("hostNetwork pod", func(t *testing.T) {
		g := NewWithT(t)
		s.ensureE2EPool(g)
		ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "host-net"}, Spec: ipv1.IPSpec{Address: "203.0.113.109"}}
		g.Expect(s.c.Create(ctx, ip)).To(Succeed())
		dep := staticip.Deployment("host-net-app", "host-net", 1)
		dep.Spec.Template.Spec.HostNetwork = true
		g.Expect(s.c.Create(ctx, dep)).To(Succeed())
		t.Cleanup(func() {
			_ = s.c.Delete(ctx, dep)
			_ = s.c.Delete(ctx, ip)
		})
		// Allowed by claimants, so not NoAllowedClaimant: no node can
		// hold it for this pod.
		s.expectClaimantRefused(t, g, "host-net", "host-net-app", "host network")
	})

	t.Run("IPv4-only pod for an IPv6 IP", func(t *testing.T) {
		g := NewWithT(t)
		pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "e2e-v6"},
			Spec: ipv1.IPPoolSpec{Addresses: []string{"2001:db8:9::/120"}, Claimants: defaultClaimants()}}
		g.Expect(s.c.Create(ctx, pool)).To(Succeed())
		ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "v6"}, Spec: ipv1.IPSpec{Address: "2001:db8:9::10"}}
		g.Expect(s.c.Create(ctx, ip)).To(Succeed())
		dep := staticip.Deployment("v6-app", "v6", 1)
		g.Expect(s.c.Create(ctx, dep)).To(Succeed())
		t.Cleanup(func() {
			_ = s.c.Delete(ctx, dep)
			_ = s.c.Delete(ctx, ip)
			_ = s.c.Delete(ctx, pool)
		})
		s.expectClaimantRefused(t, g, "v6", "v6-app", "no IPv6 address")
	})
}

// expectNotAttached waits for the IP's Attached condition to be False
// with reason and a message that says why, and checks that it stays so
// and that no node is named.
func (s *staticIPStack) expectNotAttached(g Gomega, name, reason, why string) {
	check := func(g Gomega) {
		ip := s.ip(g, name)
		c := meta.FindStatusCondition(ip.Status.Conditions, ipv1.ConditionAttached)
		g.Expect(c).NotTo(BeNil(), "%v", ip.Status.Conditions)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		g.Expect(c.Message).To(ContainSubstring(why))
		g.Expect(ip.Status.AttachedNode).To(BeEmpty())
		g.Expect(ip.Status.Pod).To(BeEmpty())
	}
	g.Eventually(check, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Consistently(check, 2*time.Second, 200*time.Millisecond).Should(Succeed())
}

// waitReady waits until the IP is Ready with that many standbys.
func (s *staticIPStack) waitReady(g Gomega, name string, standbys int) *ipv1.IP {
	var out *ipv1.IP
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, name)
		g.Expect(staticip.Ready(ip)).To(BeTrue(), "IP %s not Ready: %v", name, ip.Status.Conditions)
		g.Expect(ip.Status.Standbys).To(HaveLen(standbys))
		out = ip
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	return out
}

// runningPod waits for the Deployment's one pod to run and returns its name.
func (s *staticIPStack) runningPod(g Gomega, namespace, app string) string {
	var name string
	g.Eventually(func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(s.c.List(context.Background(), pods, client.InNamespace(namespace), client.MatchingLabels{"app": app})).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(1))
		g.Expect(pods.Items[0].Status.Phase).To(Equal(corev1.PodRunning))
		name = pods.Items[0].Name
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	return name
}

// podUIDs are the UIDs of the Deployment's pods that are not being deleted.
func (s *staticIPStack) podUIDs(g Gomega, app string) map[string]types.UID {
	pods := &corev1.PodList{}
	g.Expect(s.c.List(context.Background(), pods, client.InNamespace("default"), client.MatchingLabels{"app": app})).To(Succeed())
	out := map[string]types.UID{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out[p.Name] = p.UID
		}
	}
	return out
}

// recordIP polls the IP every 20 ms for the rest of the test and returns
// every distinct status it saw.
func (s *staticIPStack) recordIP(t *testing.T, name string) func() []ipv1.IPStatus {
	var mu sync.Mutex
	var seen []ipv1.IPStatus
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			ip := &ipv1.IP{}
			if err := s.c.Get(context.Background(), client.ObjectKey{Name: name}, ip); err != nil {
				continue
			}
			st := ip.Status
			st.Conditions = nil
			mu.Lock()
			if len(seen) == 0 || fmt.Sprint(seen[len(seen)-1]) != fmt.Sprint(st) {
				seen = append(seen, st)
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return func() []ipv1.IPStatus {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// refusals are the ClaimRefused Events of a pod.
func refusals(ctx context.Context, namespace, pod string) ([]corev1.Event, error) {
	cs, err := theLab.Clientset()
	if err != nil {
		return nil, err
	}
	list, err := cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod + ",reason=ClaimRefused"})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func podKey(key string) client.ObjectKey {
	ns, name, _ := strings.Cut(key, "/")
	return client.ObjectKey{Namespace: ns, Name: name}
}

// pinned puts the Deployment's pods on one node.
func pinned(dep *appsv1.Deployment, node string) *appsv1.Deployment {
	dep.Spec.Template.Spec.NodeName = node
	return dep
}

// cordon marks the node unschedulable until the test ends.
func cordon(t *testing.T, g Gomega, c client.Client, node string) {
	set := func(unschedulable bool) error {
		return c.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
			testenv.MergePatch(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable)))
	}
	g.Expect(set(true)).To(Succeed(), "cordon %s", node)
	t.Cleanup(func() {
		if err := set(false); err != nil {
			t.Errorf("uncordon %s: %v", node, err)
		}
	})
}

// reusePodIP puts a new pod namespace behind the node with addr, the pod
// IP of a pod that is gone, as a CNI reusing a freed address would. The
// caller keeps other pods off the node (kwok would give them the freed IP).
// It waits until the lab has unplugged the old pod.
func (s *staticIPStack) reusePodIP(t *testing.T, g Gomega, node, oldPod string, addr netip.Addr) string {
	g.Eventually(func() string { return s.pods.PodNamespace(oldPod) }, 20*time.Second, 20*time.Millisecond).
		Should(BeEmpty(), "the lab unplugged %s", oldPod)
	// The lab may still be removing the old pod's route (EEXIST meanwhile).
	var ns string
	g.Eventually(func() (err error) {
		ns, err = theLab.Net.AddPod(node, "reuser", addr)
		return err
	}, 3*time.Second, 50*time.Millisecond).Should(Succeed(), "pods of the lab on %s: %v", node, s.pods.Pods())
	t.Cleanup(func() { _ = theLab.Net.RemovePod(node, "reuser") })
	return ns
}

// nftHolds reports whether table inet kubext on the node maps the address
// (dnat4 key) or maps anything to it (snat4 value).
func nftHolds(node string, addr netip.Addr) (bool, error) {
	a := addr.AsSlice()
	for _, m := range []struct {
		name string
		val  bool // the address is the element's value, not its key
	}{{"dnat4", false}, {"snat4", true}} {
		elems, err := nftElements(node, m.name)
		if err != nil {
			return false, err
		}
		for _, e := range elems {
			if (!m.val && bytes.HasPrefix(e.Key, a)) || (m.val && bytes.Equal(e.Val, a)) {
				return true, nil
			}
		}
	}
	return false, nil
}

// nftElements lists the elements of a set or map of table inet kubext on
// the node (an expired element is not listed).
func nftElements(node, set string) ([]nftables.SetElement, error) {
	ns, err := netns.GetFromName(theLab.Net.NodeNamespace(node))
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.CloseLasting() }()
	s, err := c.GetSetByName(&nftables.Table{Name: "kubext", Family: nftables.TableFamilyINet}, set)
	if err != nil {
		return nil, fmt.Errorf("nftables %s on %s: %w", set, node, err)
	}
	return c.GetSetElements(s)
}

// freeze stops the process with SIGSTOP for d and resumes it with SIGCONT;
// a failed test resumes it too.
func (s *staticIPStack) freeze(t *testing.T, p *lab.Process, d time.Duration) {
	resume := s.freezeAsync(t, p)
	time.Sleep(d)
	resume()
}

// freezeAsync stops the process with SIGSTOP and returns what resumes it;
// the test's cleanup resumes it in any case.
func (s *staticIPStack) freezeAsync(t *testing.T, p *lab.Process) func() {
	t.Helper()
	pid, err := pidOf(p)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume := func() { once.Do(func() { _ = syscall.Kill(-pid, syscall.SIGCONT) }) }
	t.Cleanup(resume)
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s (pid %d): %v", p.Name, pid, err)
	}
	return resume
}

// pidOf finds the process the lab started for p: a child of this test
// process (the lab starts them directly, nsenter execs the program) whose
// output goes to p.Log.
func pidOf(p *lab.Process) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(self) {
			continue
		}
		if out, err := os.Readlink(filepath.Join("/proc", e.Name(), "fd", "1")); err == nil && out == p.Log {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no child process writes to %s", p.Log)
}

// replaceManager runs a manager with other flags for the rest of the test
// and puts the package's manager back afterwards.
func (s *staticIPStack) replaceManager(t *testing.T, args []string) {
	ctx := context.Background()
	s.manager.Kill()
	forgetLeader(t)
	m, err := theLab.StartManager(ctx, "manager-"+strings.ReplaceAll(t.Name(), "/", "-"), args...)
	if err != nil {
		t.Fatal(err)
	}
	s.manager = m
	t.Cleanup(func() {
		m.Kill()
		forgetLeader(t)
		var err error
		if s.manager, err = theLab.StartManager(ctx, "manager", managerArgs...); err != nil {
			t.Fatal(err)
		}
		s.waitLeader(t, s.manager)
	})
	s.waitLeader(t, m)
}

// forgetLeader deletes the leader election Lease of a manager that was
// killed, so that the next one leads at once instead of after the lease.
func forgetLeader(t *testing.T) {
	cs, err := theLab.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	err = cs.CoordinationV1().Leases(lab.SystemNamespace).Delete(context.Background(), "manager.kubext.io", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// waitLeader waits until the manager leads: after forgetLeader, it is the
// only manager running, so a Lease with a holder is its.
func (s *staticIPStack) waitLeader(t *testing.T, m *lab.Manager) {
	cs, err := theLab.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		l, err := cs.CoordinationV1().Leases(lab.SystemNamespace).Get(context.Background(), "manager.kubext.io", metav1.GetOptions{})
		if err == nil && ptr.Deref(l.Spec.HolderIdentity, "") != "" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the manager did not become leader within 30 s (see %s)", m.Log)
}

// expectClaimantRefused waits until the running pod of deployment app in
// default is refused IP ip: the IP is not attached (NoEligibleNode, the
// cause in the message) and the pod has a ClaimRefused Event.
func (s *staticIPStack) expectClaimantRefused(t *testing.T, g Gomega, ip, app, cause string) {
	t.Helper()
	ctx := context.Background()
	pod := s.runningPod(g, "default", app)
	s.expectNotAttached(g, ip, ipv1.ReasonNoEligibleNode, cause)
	g.Eventually(func() ([]corev1.Event, error) { return refusals(ctx, "default", pod) },
		30*time.Second, 250*time.Millisecond).ShouldNot(BeEmpty())
	ev, _ := refusals(ctx, "default", pod)
	t.Logf("%s refused %s: %s", ip, pod, ev[0].Message)
}
