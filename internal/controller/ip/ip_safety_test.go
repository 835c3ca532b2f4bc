package ip

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/test/testenv"
)

// The attacks and faults of issue 9 on the controller, each against the
// real API server with fake agents following the agents' protocol.

// namespace creates a namespace for the test.
func (f *fixture) namespace(name string) string {
	f.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return name
}

// podIn creates a claiming pod in a namespace, with labels, Ready.
func (f *fixture) podIn(ns, name, ip, node, podIP string, labels map[string]string, hostNetwork bool) *corev1.Pod {
	f.T.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: map[string]string{ipv1.AnnotationIP: ip}},
		Spec:       corev1.PodSpec{NodeName: node, HostNetwork: hostNetwork, Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
	}
	f.Create(p)
	f.setReady(p, true, podIP)
	return p
}

// A pod in a namespace the IP's pool does not allow never holds the IP and
// is never a standby, although it claimed first (older); it is told why.
func TestOnlyAllowedPodsClaim(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.pool(pool, "203.0.113.128/29") // claimants: namespace default
	tenant := f.namespace(f.name("tenant"))
	n1, n2 := f.node(f.name("a")), f.node(f.name("b"))
	startAgent(t, n1)
	startAgent(t, n2)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	thief := f.podIn(tenant, f.name("thief"), name, n1, "192.0.2.31", nil, false)

	f.G.Eventually(func(g Gomega) {
		c := condition(f.ip(name), ipv1.ConditionAttached)
		g.Expect(c.Reason).To(Equal(ipv1.ReasonNoAllowedClaimant))
		g.Expect(c.Message).To(ContainSubstring("namespace " + tenant + " is not allowed by the pool's spec.claimants"))
	}, testenv.WaitFor).Should(Succeed())
	f.G.Eventually(func() []string { return podEvents(f.Ctx, thief) }, testenv.WaitFor).Should(ContainElement(EventClaimRefused))

	time.Sleep(50 * time.Millisecond)
	owner := f.pod(f.name("owner"), name, n2, "192.0.2.32")
	f.G.Eventually(func(g Gomega) {
		ip := f.ip(name)
		g.Expect(ip.Status.Pod).To(Equal("default/" + owner.Name))
		g.Expect(ip.Status.AttachedNode).To(Equal(n2))
		g.Expect(ip.Status.Standbys).To(BeEmpty(), "the refused pod is no standby")
	}, testenv.WaitFor).Should(Succeed())

	// The IP narrows further with a pod selector: the owner lacks the label.
	cur := f.ip(name)
	orig := cur.DeepCopy()
	cur.Spec.Claimants = &ipv1.IPClaimants{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"partner": "telco"}}}
	f.G.Expect(k8s.Patch(f.Ctx, cur, client.MergeFrom(orig))).To(Succeed())
	f.G.Eventually(func(g Gomega) {
		ip := f.ip(name)
		g.Expect(ip.Status.Node).To(BeEmpty())
		g.Expect(ip.Status.AttachedNode).To(BeEmpty(), "detached from the node of a pod no longer allowed")
		g.Expect(condition(ip, ipv1.ConditionAttached).Message).To(ContainSubstring("do not match the IP's spec.claimants.podSelector"))
	}, testenv.WaitFor).Should(Succeed())
}

// An IP and pool that name no namespace are claimable by no pod.
func TestNoClaimantsMeansNobody(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.Create(&ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: ipv1.IPPoolSpec{Addresses: []string{"203.0.113.136/29"}}})
	node := f.node(f.name("n"))
	startAgent(t, node)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	f.pod(f.name("app"), name, node, "192.0.2.41")
	f.G.Eventually(func(g Gomega) {
		c := condition(f.ip(name), ipv1.ConditionAttached)
		g.Expect(c.Reason).To(Equal(ipv1.ReasonNoAllowedClaimant))
		g.Expect(c.Message).To(ContainSubstring("neither the IP nor its pool names the namespaces allowed to claim it"))
	}, testenv.WaitFor).Should(Succeed())
	f.G.Consistently(func() string { return f.ip(name).Status.Node }, time.Second).Should(BeEmpty())

	// Naming the namespace on the IP itself is enough.
	cur := f.ip(name)
	orig := cur.DeepCopy()
	cur.Spec.Claimants = &ipv1.IPClaimants{Namespaces: []string{"default"}}
	f.G.Expect(k8s.Patch(f.Ctx, cur, client.MergeFrom(orig))).To(Succeed())
	f.G.Eventually(func() string { return f.ip(name).Status.AttachedNode }, testenv.WaitFor).Should(Equal(node))
}

// A host-network pod would SNAT the whole node; a pod without an address
// of the IP's family could never be reached at it. Both are refused with a
// reason rather than waiting forever.
func TestUnfitClaimantsAreRefusedWithAReason(t *testing.T) {
	f := newFixture(t)
	pool, v4, v6 := f.name("pool"), f.name("v4"), f.name("v6")
	f.pool(pool, "203.0.113.144/29")
	pool6 := f.name("pool6")
	f.pool(pool6, "2001:db8:9::/120")
	node := f.node(f.name("n"))
	startAgent(t, node)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: v4}, Spec: ipv1.IPSpec{Pool: pool}})
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: v6}, Spec: ipv1.IPSpec{Pool: pool6}})
	f.podIn("default", f.name("host"), v4, node, "192.0.2.51", nil, true)
	f.pod(f.name("only4"), v6, node, "192.0.2.52")
	f.G.Eventually(func(g Gomega) {
		g.Expect(condition(f.ip(v4), ipv1.ConditionAttached).Message).To(ContainSubstring("runs in the host network"))
		g.Expect(condition(f.ip(v6), ipv1.ConditionAttached).Message).To(ContainSubstring("has no IPv6 address"))
	}, testenv.WaitFor).Should(Succeed())
	f.G.Expect(f.ip(v4).Status.Node).To(BeEmpty())
	f.G.Expect(f.ip(v6).Status.Node).To(BeEmpty())
}

// Deleting the holder's heartbeat Lease (anyone allowed to delete Leases
// can) says nothing about its agent: the address stays where it is.
func TestDeletedLeaseMovesNothing(t *testing.T) {
	f := newFixture(t)
	name := f.name("ip")
	n1, _, _ := f.holderAndStandby(name, "203.0.113.152/29", "192.0.2.61", "192.0.2.62")
	before := f.ip(name).Status

	// Delete it again and again for 3 s (more than the 1 s lease): the
	// agent recreates it each time.
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: heartbeatNS, Name: heartbeat.LeaseName(ipv1.AgentComponent, n1)}}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		err := k8s.Delete(f.Ctx, lease)
		f.G.Expect(err == nil || apierrors.IsNotFound(err)).To(BeTrue())
		time.Sleep(200 * time.Millisecond)
	}
	after := f.ip(name).Status
	f.G.Expect(after.Node).To(Equal(n1))
	f.G.Expect(after.AttachedNode).To(Equal(n1))
	f.G.Expect(after.Pod).To(Equal(before.Pod))
	f.G.Expect(after.LastMoveTime).To(Equal(before.LastMoveTime))
	f.G.Expect(ipEvent(f.Ctx, name, ipv1.ReasonNodeLost)).To(BeNil())
}

// A reservation outlives any delete of it until the address is let go:
// neither deleting the IPAddress nor a foreground delete of the IP frees the
// address while a node may answer for it.
func TestReservationOutlivesItsDeletion(t *testing.T) {
	f := newFixture(t)
	pool, first, second := f.name("pool"), f.name("first"), f.name("second")
	f.pool(pool, "203.0.113.160/29")
	n1, n2 := f.node(f.name("a")), f.node(f.name("b"))
	a1 := startAgent(t, n1)
	startAgent(t, n2)
	const addr = "203.0.113.161"
	ip1 := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: first}, Spec: ipv1.IPSpec{Address: addr}}
	f.Create(ip1)
	f.pod(f.name("p1"), first, n1, "192.0.2.71")
	f.G.Eventually(func() string { return f.ip(first).Status.AttachedPod }, testenv.WaitFor).ShouldNot(BeEmpty())

	// Someone deletes the IPAddress: it stays (terminating), the IP keeps
	// its address and says so.
	res := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: addr}}
	f.G.Expect(k8s.Delete(f.Ctx, res)).To(Succeed())
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKeyFromObject(res), res)).To(Succeed())
	f.G.Expect(res.DeletionTimestamp).NotTo(BeNil())
	f.G.Eventually(func() string { return condition(f.ip(first), ipv1.ConditionAllocated).Message }, testenv.WaitFor).Should(
		ContainSubstring("its IPAddress was deleted; the reservation stays"))

	// Another IP wants the same address on another node: refused while the
	// first one holds it.
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: second}, Spec: ipv1.IPSpec{Address: addr}})
	f.pod(f.name("p2"), second, n2, "192.0.2.72")
	f.G.Eventually(func() string { return condition(f.ip(second), ipv1.ConditionAllocated).Reason }, testenv.WaitFor).Should(Equal(ipv1.ReasonAddressInUse))

	// The first IP is deleted in the foreground (the garbage collector
	// deletes its dependents first) while its node's agent is frozen: the
	// reservation must stay until that node is confirmed to have let go.
	a1.stop()
	f.G.Expect(k8s.Delete(f.Ctx, ip1, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
	f.G.Consistently(func() string { return f.ip(second).Status.Address }, 500*time.Millisecond, 50*time.Millisecond).Should(BeEmpty(),
		"the address is not handed on while node 1 may answer")
	// Node 1's lease runs out (it fenced itself): now, and only now, the
	// address goes to the second IP, on node 2 — within the retry bound.
	f.G.Eventually(func(g Gomega) {
		ip := f.ip(second)
		g.Expect(ip.Status.Address).To(Equal(addr))
		g.Expect(ip.Status.AttachedNode).To(Equal(n2))
	}, testenv.WaitFor).Should(Succeed())
}

// Refusals are retried when their cause goes away: a pool created for an
// address in no pool, an address freed.
func TestWaitingIPsAreRetriedWhenTheCauseGoes(t *testing.T) {
	f := newFixture(t)
	orphan := f.name("orphan")
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: orphan}, Spec: ipv1.IPSpec{Address: "203.0.113.169"}})
	f.G.Eventually(func() string { return condition(f.ip(orphan), ipv1.ConditionAllocated).Reason }, testenv.WaitFor).Should(Equal(ipv1.ReasonPoolNotFound))
	f.pool(f.name("late"), "203.0.113.168/29")
	f.G.Eventually(func() string { return condition(f.ip(orphan), ipv1.ConditionAllocated).Reason }, 10*time.Second).Should(
		Equal(ipv1.ReasonAddressAllocated))

	taker, waiter := f.name("taker"), f.name("waiter")
	takerIP := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: taker}, Spec: ipv1.IPSpec{Address: "203.0.113.170"}}
	f.Create(takerIP)
	f.G.Eventually(func() bool { return f.ip(taker).Status.Assigned }, testenv.WaitFor).Should(BeTrue())
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: waiter}, Spec: ipv1.IPSpec{Address: "203.0.113.170"}})
	f.G.Eventually(func() string { return condition(f.ip(waiter), ipv1.ConditionAllocated).Reason }, testenv.WaitFor).Should(Equal(ipv1.ReasonAddressInUse))
	f.G.Expect(k8s.Delete(f.Ctx, takerIP)).To(Succeed())
	f.G.Eventually(func() string { return condition(f.ip(waiter), ipv1.ConditionAllocated).Reason }, 10*time.Second).Should(
		Equal(ipv1.ReasonAddressAllocated))
}

// A pool shrunk under an assigned address keeps the address with its IP,
// and its failover keeps working.
func TestShrunkPoolKeepsTheAddressAndItsFailover(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	_, n2, a1 := f.holderAndStandby(name, "203.0.113.176/29", "192.0.2.81", "192.0.2.82")
	addr := f.ip(name).Status.Address

	p := &ipv1.IPPool{}
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: pool}, p)).To(Succeed())
	orig := p.DeepCopy()
	p.Spec.Addresses = []string{"203.0.113.184/29"}
	f.G.Expect(k8s.Patch(f.Ctx, p, client.MergeFrom(orig))).To(Succeed())
	f.G.Eventually(func() string { return condition(f.ip(name), ipv1.ConditionAllocated).Message }, testenv.WaitFor).Should(
		ContainSubstring("stays reserved for this IP although"))

	a1.stop()
	f.G.Expect(f.readyAttachedOn(name, n2).Status.Address).To(Equal(addr))
}

// Addresses that no node may answer for are never attached, and say why.
func TestUnattachableAddressesAreReported(t *testing.T) {
	f := newFixture(t)
	node := f.node(f.name("n"))
	startAgent(t, node)

	pool, nodeIP := f.name("pool"), f.name("node-ip")
	f.pool(pool, "203.0.113.200/29")
	owner := f.node(f.name("owner"))
	n := &corev1.Node{}
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: owner}, n)).To(Succeed())
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "203.0.113.201"}}
	f.G.Expect(k8s.Status().Update(f.Ctx, n)).To(Succeed())
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: nodeIP}, Spec: ipv1.IPSpec{Address: "203.0.113.201"}})
	f.pod(f.name("on-node"), nodeIP, node, "192.0.2.92")

	f.G.Eventually(func(g Gomega) {
		c := condition(f.ip(nodeIP), ipv1.ConditionAttached)
		g.Expect(c.Reason).To(Equal(ipv1.ReasonAddressConflict))
		g.Expect(c.Message).To(ContainSubstring("an address of node " + owner))
	}, testenv.WaitFor).Should(Succeed())
	f.G.Expect(f.ip(nodeIP).Status.Node).To(BeEmpty())
}

// An address inside a node's pod range would shadow a pod; a pool whose
// nodeSelector does not parse must say so rather than read as "no node
// matches" on a Ready pool.
func TestPodRangesAndInvalidSelectorsAreReported(t *testing.T) {
	f := newFixture(t)
	node := f.node(f.name("n"))
	startAgent(t, node)

	pods, podIP := f.name("pods"), f.name("pod-range-ip")
	f.pool(pods, "203.0.113.208/29")
	owner := f.node(f.name("owner"))
	n := &corev1.Node{}
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: owner}, n)).To(Succeed())
	orig := n.DeepCopy()
	n.Spec.PodCIDR, n.Spec.PodCIDRs = "203.0.113.208/30", []string{"203.0.113.208/30"}
	f.G.Expect(k8s.Patch(f.Ctx, n, client.MergeFrom(orig))).To(Succeed())
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: podIP}, Spec: ipv1.IPSpec{Address: "203.0.113.210"}})
	f.pod(f.name("on-pods"), podIP, node, "192.0.2.93")

	bad, badIP := f.name("bad-selector"), f.name("bad-selector-ip")
	f.Create(&ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: bad}, Spec: ipv1.IPPoolSpec{Addresses: []string{"203.0.113.216/29"},
		Claimants: &ipv1.PoolClaimants{Namespaces: []string{"default"}},
		NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "zone", Operator: metav1.LabelSelectorOpIn}}}}}) // In without values
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: badIP}, Spec: ipv1.IPSpec{Pool: bad}})
	f.pod(f.name("on-bad"), badIP, node, "192.0.2.94")

	f.G.Eventually(func(g Gomega) {
		c := condition(f.ip(podIP), ipv1.ConditionAttached)
		g.Expect(c.Reason).To(Equal(ipv1.ReasonAddressConflict))
		g.Expect(c.Message).To(ContainSubstring("in the pod range 203.0.113.208/30 of node " + owner))
		b := condition(f.ip(badIP), ipv1.ConditionAttached)
		g.Expect(b.Reason).To(Equal(ipv1.ReasonNoEligibleNode))
		g.Expect(b.Message).To(ContainSubstring("the nodeSelector of pool " + bad + " is invalid"))
	}, testenv.WaitFor).Should(Succeed())
	poolObj := &ipv1.IPPool{}
	f.G.Eventually(func() metav1.Condition {
		_ = k8s.Get(f.Ctx, client.ObjectKey{Name: bad}, poolObj)
		return poolCondition(poolObj, ipv1.ConditionReady)
	}, testenv.WaitFor).Should(And(HaveField("Reason", ipv1.ReasonInvalidSpec), HaveField("Message", ContainSubstring("spec.nodeSelector is invalid"))))
	for _, name := range []string{podIP, badIP} {
		f.G.Expect(f.ip(name).Status.Node).To(BeEmpty(), name)
	}
}

// An address inside a Service range (a ServiceCIDR, as the API server
// keeps them) would shadow Services; it is never attached.
func TestServiceRangeIsReported(t *testing.T) {
	f := newFixture(t)
	node := f.node(f.name("n"))
	startAgent(t, node)
	cidr := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: f.name("svc")},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"203.0.113.224/28"}}}
	f.Create(cidr)
	pool, name := f.name("pool"), f.name("svc-ip")
	f.pool(pool, "203.0.113.224/28")
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Address: "203.0.113.230"}})
	f.pod(f.name("app"), name, node, "192.0.2.95")
	f.G.Eventually(func(g Gomega) {
		c := condition(f.ip(name), ipv1.ConditionAttached)
		g.Expect(c.Reason).To(Equal(ipv1.ReasonAddressConflict))
		g.Expect(c.Message).To(ContainSubstring("in the Service range 203.0.113.224/28 (ServiceCIDR " + cidr.Name + ")"))
	}, testenv.WaitFor).Should(Succeed())
	f.G.Expect(f.ip(name).Status.Node).To(BeEmpty())
}

func poolCondition(p *ipv1.IPPool, t string) metav1.Condition {
	return ptr.Deref(meta.FindStatusCondition(p.Status.Conditions, t), metav1.Condition{})
}
