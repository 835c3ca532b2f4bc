package ip

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/test/testenv"
)

// fixture is testenv's, with this package's objects: IPs, their pools,
// nodes and claiming pods.
type fixture struct{ *testenv.Fixture }

func newFixture(t *testing.T) *fixture { return &fixture{testenv.NewFixture(t, k8s)} }

func (f *fixture) name(s string) string { return s + "-" + f.ID }

func (f *fixture) node(name string) string {
	f.Create(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "edge"}}})
	return name
}

// pool creates a pool whose IPs pods in namespace default may claim.
func (f *fixture) pool(name string, cidr string) {
	f.Create(&ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPPoolSpec{Addresses: []string{cidr},
		Claimants: &ipv1.PoolClaimants{Namespaces: []string{"default"}}}})
}

// pod creates a claiming pod on a node, Ready with an address.
func (f *fixture) pod(name, ip, node, podIP string) *corev1.Pod {
	f.T.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Annotations: map[string]string{ipv1.AnnotationIP: ip}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
	}
	f.Create(p)
	f.setReady(p, true, podIP)
	return p
}

func (f *fixture) setReady(p *corev1.Pod, ready bool, podIP string) {
	f.T.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	orig := p.DeepCopy()
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP, p.Status.PodIPs = podIP, []corev1.PodIP{{IP: podIP}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	f.G.Expect(k8s.Status().Patch(f.Ctx, p, client.MergeFrom(orig))).To(Succeed())
}

func (f *fixture) ip(name string) *ipv1.IP {
	ip := &ipv1.IP{}
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: name}, ip)).To(Succeed())
	return ip
}

// holderAndStandby makes IP name in a new pool of cidr (named f.name("pool")),
// claimed by a holder on a first node and, younger, a standby on a second,
// each with an agent, and waits until the holder is confirmed and the
// standby listed.
func (f *fixture) holderAndStandby(name, cidr, holderIP, standbyIP string) (n1, n2 string, a1 *fakeAgent) {
	f.T.Helper()
	pool := f.name("pool")
	f.pool(pool, cidr)
	n1, n2 = f.node(f.name("a")), f.node(f.name("b"))
	a1 = startAgent(f.T, n1)
	startAgent(f.T, n2)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	f.pod(f.name("first"), name, n1, holderIP)
	f.G.Eventually(func() string { return f.ip(name).Status.AttachedPod }, testenv.WaitFor).ShouldNot(BeEmpty())
	time.Sleep(50 * time.Millisecond) // the second pod is younger: a standby
	f.pod(f.name("second"), name, n2, standbyIP)
	f.G.Eventually(func() []string { return f.ip(name).Status.Standbys }, testenv.WaitFor).Should(HaveLen(1))
	return n1, n2, a1
}

// heldBy makes IP name in a new pool of cidr (named f.name("pool")),
// claimed by one pod (f.name(pod), podIP) on a node with an agent, and
// waits until that node is attached. It returns the node's agent and the
// pod.
func (f *fixture) heldBy(name, cidr, pod, podIP string) (*fakeAgent, *corev1.Pod) {
	f.T.Helper()
	pool := f.name("pool")
	f.pool(pool, cidr)
	node := f.node(f.name("n"))
	agent := startAgent(f.T, node)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	p := f.pod(f.name(pod), name, node, podIP)
	f.G.Eventually(func() string { return f.ip(name).Status.AttachedNode }, testenv.WaitFor).Should(Equal(node))
	return agent, p
}

// readyAttachedOn waits until IP name is attached on node and Ready, and
// returns it.
func (f *fixture) readyAttachedOn(name, node string) *ipv1.IP {
	f.T.Helper()
	var ip *ipv1.IP
	f.G.Eventually(func(g Gomega) {
		ip = f.ip(name)
		g.Expect(ip.Status.AttachedNode).To(Equal(node))
		g.Expect(condition(ip, ipv1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	}, testenv.WaitFor).Should(Succeed())
	return ip
}

func condition(ip *ipv1.IP, t string) metav1.Condition {
	if c := meta.FindStatusCondition(ip.Status.Conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// An IP without an address gets the pool's first free address, reserved
// as an IPAddress object, and is placed on the node of its Ready claimant;
// it is Ready once that node's agent confirms.
func TestAllocatesAndPlacesOnTheHolder(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.pool(pool, "192.0.2.0/29")
	node := f.node(f.name("n"))
	startAgent(t, node)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	f.pod(f.name("app"), name, node, "203.0.113.5")

	f.G.Eventually(func(g Gomega) {
		ip := f.ip(name)
		g.Expect(ip.Status.Address).To(Equal("192.0.2.1"))
		g.Expect(ip.Status.Node).To(Equal(node))
		g.Expect(ip.Status.AttachedNode).To(Equal(node))
		g.Expect(ip.Status.Pod).To(Equal("default/" + f.name("app")))
		g.Expect(ip.Status.Assigned && ip.Status.Claimed).To(BeTrue())
		g.Expect(condition(ip, ipv1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(ip.Status.ObservedGeneration).To(Equal(ip.Generation))
	}, testenv.WaitFor).Should(Succeed())

	// Scraped, it is Ready (from the manager's cache, which may lag the
	// API server by a moment).
	f.G.Eventually(func() map[string]string { return readyMetric(t, name) }, testenv.WaitFor).Should(
		Equal(map[string]string{"value": "1", "reason": ipv1.ReasonReady}))

	addr := &networkingv1.IPAddress{}
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: "192.0.2.1"}, addr)).To(Succeed())
	f.G.Expect(addr.Spec.ParentRef.Name).To(Equal(name))
	f.G.Expect(addr.Labels).To(HaveKeyWithValue(ipv1.LabelPool, pool))

	// Nothing changes: the controller writes nothing.
	rv := f.ip(name).ResourceVersion
	other := f.pod(f.name("noise"), f.name("other-ip"), node, "203.0.113.9")
	_ = other
	f.G.Consistently(func() string { return f.ip(name).ResourceVersion }, 2*time.Second).Should(Equal(rv))
}

// Fifty clients create IPs for the same address at once: the API server
// gives the address to exactly one, the others say who has it.
func TestConcurrentCreationsOfOneAddress(t *testing.T) {
	f := newFixture(t)
	pool := f.name("pool")
	f.pool(pool, "198.51.100.0/28")
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: f.name(fmt.Sprintf("same-%02d", i))},
				Spec: ipv1.IPSpec{Address: "198.51.100.7"}}
			if err := k8s.Create(f.Ctx, ip); err == nil {
				t.Cleanup(func() { _ = k8s.Delete(context.Background(), ip) })
			}
		}()
	}
	wg.Wait()
	f.G.Eventually(func(g Gomega) {
		allocated, inUse := 0, 0
		for i := range n {
			ip := f.ip(f.name(fmt.Sprintf("same-%02d", i)))
			switch c := condition(ip, ipv1.ConditionAllocated); {
			case c.Status == metav1.ConditionTrue:
				allocated++
				g.Expect(ip.Status.Address).To(Equal("198.51.100.7"))
			case c.Reason == ipv1.ReasonAddressInUse:
				inUse++
				g.Expect(c.Message).To(ContainSubstring("198.51.100.7 is already reserved by ips.ip.kubext.io"))
				g.Expect(ip.Status.Address).To(BeEmpty())
			}
		}
		g.Expect(allocated).To(Equal(1))
		g.Expect(inUse).To(Equal(n - 1))
	}, testenv.WaitFor).Should(Succeed())
}

// When the holder's node stops renewing its heartbeat, the standby on a
// healthy node takes over once the lease has run out.
func TestFailoverToStandbyWhenTheNodeIsLost(t *testing.T) {
	f := newFixture(t)
	name := f.name("ip")
	n1, n2, a1 := f.holderAndStandby(name, "203.0.113.0/29", "192.0.2.11", "192.0.2.12")
	f.G.Expect(f.ip(name).Status.Standbys).To(Equal([]string{"default/" + f.name("second")}))

	a1.stop()
	f.G.Expect(f.readyAttachedOn(name, n2).Status.Node).To(Equal(n2))
	// Not before the 1 s lease ran out after the last renewal the API
	// server took (a renewal cut short by stop may or may not have
	// landed: the Lease says which): the lost node had to have fenced
	// itself.
	lost := f.eventOn(name, ipv1.ReasonNodeLost)
	lease := &coordinationv1.Lease{}
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Namespace: heartbeatNS, Name: heartbeat.LeaseName(ipv1.AgentComponent, n1)}, lease)).To(Succeed())
	f.G.Expect(lost.EventTime.Sub(lease.Spec.RenewTime.Time)).To(BeNumerically(">=", time.Second))
}

// A move between two healthy nodes never points at the new node while the
// old one is still attached.
func TestHandOverWaitsForTheOldNodeToLetGo(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.pool(pool, "203.0.113.8/29")
	n1, n2 := f.node(f.name("a")), f.node(f.name("b"))
	startAgent(t, n1)
	startAgent(t, n2)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	first := f.pod(f.name("first"), name, n1, "192.0.2.21")
	f.G.Eventually(func() string { return f.ip(name).Status.AttachedNode }, testenv.WaitFor).Should(Equal(n1))
	f.pod(f.name("second"), name, n2, "192.0.2.22")

	// Watch every version of the IP while the holder turns NotReady.
	ctx, cancel := context.WithCancel(f.Ctx)
	defer cancel()
	w, err := k8sWatch(ctx, name)
	f.G.Expect(err).NotTo(HaveOccurred())
	f.setReady(first, false, "192.0.2.21")
	f.G.Eventually(func() string { return f.ip(name).Status.AttachedNode }, testenv.WaitFor).Should(Equal(n2))
	cancel()
	for _, v := range w() {
		if v.Status.Node != "" && v.Status.AttachedNode != "" {
			f.G.Expect(v.Status.Node).To(Equal(v.Status.AttachedNode), "placed on %s while %s was attached", v.Status.Node, v.Status.AttachedNode)
		}
	}
}

// Deleting an IP detaches it first, then releases the address.
func TestDeleteDetachesThenReleases(t *testing.T) {
	f := newFixture(t)
	name := f.name("ip")
	agent, _ := f.heldBy(name, "203.0.113.16/29", "app", "192.0.2.31")
	addr := f.ip(name).Status.Address

	f.G.Expect(k8s.Delete(f.Ctx, f.ip(name))).To(Succeed())
	f.G.Eventually(func() error { return k8s.Get(f.Ctx, client.ObjectKey{Name: name}, &ipv1.IP{}) }, testenv.WaitFor).ShouldNot(Succeed())
	agent.mu.Lock()
	f.G.Expect(agent.attached[name]).To(BeFalse(), "the agent released it before the IP went away")
	agent.mu.Unlock()
	f.G.Eventually(func() error { return k8s.Get(f.Ctx, client.ObjectKey{Name: addr}, &networkingv1.IPAddress{}) }, testenv.WaitFor).ShouldNot(Succeed())
}

// Bad references are reported, not crashed on; the claim waits.
func TestMissingPoolAndMissingIPAreReported(t *testing.T) {
	f := newFixture(t)
	name := f.name("ip")
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: f.name("nosuch")}})
	f.G.Eventually(func() metav1.Condition { return condition(f.ip(name), ipv1.ConditionAllocated) }, testenv.WaitFor).Should(
		And(HaveField("Reason", ipv1.ReasonPoolNotFound), HaveField("Message", ContainSubstring("does not exist"))))

	outside := f.name("outside")
	f.pool(f.name("pool"), "203.0.113.24/29")
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: outside}, Spec: ipv1.IPSpec{Address: "203.0.113.200", Pool: f.name("pool")}})
	f.G.Eventually(func() string { return condition(f.ip(outside), ipv1.ConditionAllocated).Reason }, testenv.WaitFor).Should(Equal(ipv1.ReasonAddressOutsidePool))
	// What the KubextIPNotReady alert reads: 0, with the reason.
	f.G.Eventually(func() map[string]string { return readyMetric(t, outside) }, testenv.WaitFor).Should(
		Equal(map[string]string{"value": "0", "reason": condition(f.ip(outside), ipv1.ConditionReady).Reason}))

	node := f.node(f.name("n"))
	p := f.pod(f.name("orphan"), f.name("missing"), node, "192.0.2.41")
	f.G.Eventually(func() []string { return podEvents(f.Ctx, p) }, testenv.WaitFor).Should(ContainElement("IPNotFound"))
}

// ipEvent is the IP's Event of reason now, nil if there is none yet.
// eventOn waits for the Event with reason on the named IP and returns it:
// Events are recorded asynchronously, after the write they tell of, so a
// test that looks once right after that write may come before its Event.
func (f *fixture) eventOn(ipName, reason string) *eventsv1.Event {
	var ev *eventsv1.Event
	f.G.Eventually(func() *eventsv1.Event {
		ev = ipEvent(f.Ctx, ipName, reason)
		return ev
	}, testenv.WaitFor).ShouldNot(BeNil(), "the %s Event on IP %s", reason, ipName)
	return ev
}

func ipEvent(ctx context.Context, ipName, reason string) *eventsv1.Event {
	list := &eventsv1.EventList{}
	_ = k8s.List(ctx, list, client.InNamespace("default"))
	for _, e := range list.Items {
		if e.Regarding.Kind == "IP" && e.Regarding.Name == ipName && e.Reason == reason {
			return &e
		}
	}
	return nil
}

// ipEvents lists the reasons of the Events regarding the IP.
func ipEvents(ctx context.Context, ipName string) []string {
	list := &eventsv1.EventList{}
	_ = k8s.List(ctx, list, client.InNamespace("default"))
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "IP" && e.Regarding.Name == ipName {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

func podEvents(ctx context.Context, p *corev1.Pod) []string {
	list := &eventsv1.EventList{}
	_ = k8s.List(ctx, list, client.InNamespace(p.Namespace))
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Pod" && e.Regarding.Name == p.Name {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// k8sWatch records every version of an IP until ctx ends; the returned
// function waits for the end and hands the versions over.
func k8sWatch(ctx context.Context, name string) (func() []ipv1.IP, error) {
	w, err := k8s.Watch(ctx, &ipv1.IPList{}, client.MatchingFields{"metadata.name": name})
	if err != nil {
		return nil, err
	}
	var versions []ipv1.IP
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if ip, ok := ev.Object.(*ipv1.IP); ok {
					versions = append(versions, *ip)
				}
			}
		}
	}()
	return func() []ipv1.IP { <-done; return versions }, nil
}

// A manual move goes to the requested standby; a request for a pod that is
// not an eligible standby is refused with an Event. Either way the request
// is removed once handled.
func TestManualMove(t *testing.T) {
	f := newFixture(t)
	name := f.name("ip")
	n1, n2, _ := f.holderAndStandby(name, "203.0.113.32/29", "192.0.2.51", "192.0.2.52")
	standby := "default/" + f.name("second")
	f.G.Expect(f.ip(name).Status.Standbys).To(Equal([]string{standby}))
	f.G.Expect(f.ip(name).Status.AttachedNode).To(Equal(n1))

	annotate := func(to string) {
		ip := f.ip(name)
		orig := ip.DeepCopy()
		ip.Annotations = map[string]string{ipv1.AnnotationMoveTo: to}
		f.G.Expect(k8s.Patch(f.Ctx, ip, client.MergeFrom(orig))).To(Succeed())
	}
	annotate(standby)
	f.G.Eventually(func(g Gomega) {
		ip := f.ip(name)
		g.Expect(ip.Status.Pod).To(Equal(standby))
		g.Expect(ip.Status.AttachedNode).To(Equal(n2))
		g.Expect(ip.Annotations).NotTo(HaveKey(ipv1.AnnotationMoveTo))
	}, testenv.WaitFor).Should(Succeed())

	annotate("default/nosuch")
	f.G.Eventually(func() map[string]string { return f.ip(name).Annotations }, testenv.WaitFor).ShouldNot(HaveKey(ipv1.AnnotationMoveTo))
	f.G.Expect(f.ip(name).Status.Pod).To(Equal(standby))
	// A cluster-scoped object's Events are in the default namespace.
	f.Event("IP", client.ObjectKey{Namespace: "default", Name: name}, "MoveRefused")
}

// With spec.reassign, changing spec.address detaches the old address,
// releases it, and attaches the new one; the pod keeps its claim.
func TestReassignMovesToTheNewAddress(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.pool(pool, "203.0.113.40/29")
	node := f.node(f.name("n"))
	startAgent(t, node)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Address: "203.0.113.41", Reassign: true}})
	f.pod(f.name("app"), name, node, "192.0.2.61")
	f.G.Eventually(func() bool { return condition(f.ip(name), ipv1.ConditionReady).Status == metav1.ConditionTrue }, testenv.WaitFor).Should(BeTrue())

	ip := f.ip(name)
	orig := ip.DeepCopy()
	ip.Spec.Address = "203.0.113.42"
	f.G.Expect(k8s.Patch(f.Ctx, ip, client.MergeFrom(orig))).To(Succeed())
	f.G.Eventually(func(g Gomega) {
		ip := f.ip(name)
		g.Expect(ip.Status.Address).To(Equal("203.0.113.42"))
		g.Expect(ip.Status.Original.Address).To(Equal("203.0.113.42"))
		g.Expect(ip.Status.AttachedNode).To(Equal(node))
		g.Expect(condition(ip, ipv1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	}, testenv.WaitFor).Should(Succeed())
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: "203.0.113.41"}, &networkingv1.IPAddress{})).NotTo(Succeed(), "the old address is released")
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: "203.0.113.42"}, &networkingv1.IPAddress{})).To(Succeed())

	// Without reassign, the API server refuses the change.
	ip = f.ip(name)
	orig = ip.DeepCopy()
	ip.Spec.Reassign, ip.Spec.Address = false, "203.0.113.43"
	err := k8s.Patch(f.Ctx, ip, client.MergeFrom(orig))
	f.G.Expect(err).To(MatchError(ContainSubstring("spec.address cannot change while the IP is assigned")))
}

// With no standby, a claimant stuck on a lost node is deleted (opt-in), so
// its Deployment recreates it elsewhere without waiting for eviction.
func TestStalePodOnALostNodeIsDeleted(t *testing.T) {
	f := newFixture(t)
	name := f.name("ip")
	agent, p := f.heldBy(name, "203.0.113.48/29", "only", "192.0.2.71")

	agent.stop()
	f.G.Eventually(func(g Gomega) {
		got := &corev1.Pod{}
		err := k8s.Get(f.Ctx, client.ObjectKeyFromObject(p), got)
		g.Expect(err == nil && got.DeletionTimestamp.IsZero()).To(BeFalse(), "the stale pod is deleted")
	}, testenv.WaitFor).Should(Succeed())
	f.G.Eventually(func() string { return condition(f.ip(name), ipv1.ConditionAttached).Reason }, testenv.WaitFor).Should(
		Or(Equal(ipv1.ReasonNodeLost), Equal(ipv1.ReasonNoClaimant), Equal(ipv1.ReasonNoEligibleNode)))
	f.G.Expect(f.ip(name).Status.AttachedNode).To(BeEmpty())
}

// readyMetric is the kubext_ip_ready series of an IP as a scrape would
// read it: its value and reason, or nil when there is none.
func readyMetric(t *testing.T, ip string) map[string]string {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "kubext_ip_ready" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["ip"] == ip {
				return map[string]string{"value": fmt.Sprint(m.GetGauge().GetValue()), "reason": labels["reason"]}
			}
		}
	}
	return nil
}

// status.podUID names the holder pod itself, not only its name: a pod
// deleted and created again under the same name (a StatefulSet's
// replacement) is chosen again as the holder, and its UID replaces the
// old one's, which is what the node's agent forwards to.
func TestTheHoldersUIDFollowsAPodCreatedAgainUnderItsName(t *testing.T) {
	f := newFixture(t)
	name := f.name("ip")
	_, p := f.heldBy(name, "203.0.113.56/29", "same", "192.0.2.81")
	f.G.Eventually(func() string { return f.ip(name).Status.PodUID }, testenv.WaitFor).Should(Equal(string(p.UID)))

	f.G.Expect(k8s.Delete(f.Ctx, p, client.GracePeriodSeconds(0))).To(Succeed())
	again := f.pod(p.Name, name, p.Spec.NodeName, "192.0.2.82")
	f.G.Expect(again.UID).NotTo(Equal(p.UID))
	f.G.Eventually(func(g Gomega) {
		ip := f.ip(name)
		g.Expect(ip.Status.Pod).To(Equal(p.Namespace + "/" + p.Name))
		g.Expect(ip.Status.PodUID).To(Equal(string(again.UID)))
	}, testenv.WaitFor).Should(Succeed())
}
