package ipagent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/netconf"
	"github.com/kubext/kubext/test/testenv"
)

// quiet is how long a test watches for something that must not happen:
// several resyncs of the agent.
const quiet = time.Second

// fixture names objects uniquely per test so tests share one API server.
type fixture struct{ *testenv.Fixture }

// newFixture also checks, when the test ends, that the agent kept the
// protocol throughout (see fakeDataplane).
func newFixture(t *testing.T) *fixture {
	before := len(dp.protocolViolations())
	t.Cleanup(func() {
		if v := dp.protocolViolations()[before:]; len(v) > 0 {
			t.Errorf("protocol violations: %q", v)
		}
	})
	return &fixture{testenv.NewFixture(t, k8s)}
}

func (f *fixture) name(s string) string { return s + "-" + f.ID }

// pod creates a pod on node with podIP (none if empty) and returns it as
// namespace/name, the way status.pod names the holder.
func (f *fixture) pod(name, node, podIP string) string {
	f.T.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: f.name(name)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
	}
	f.G.Expect(k8s.Create(f.Ctx, p)).To(Succeed())
	f.T.Cleanup(func() { _ = k8s.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
	if podIP != "" {
		orig := p.DeepCopy()
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP, p.Status.PodIPs = podIP, []corev1.PodIP{{IP: podIP}}
		f.G.Expect(k8s.Status().Patch(f.Ctx, p, client.MergeFrom(orig))).To(Succeed())
	}
	return p.Namespace + "/" + p.Name
}

// ip creates an IP for addr with the status the controller would have
// written.
func (f *fixture) ip(name, addr string, status ipv1.IPStatus) string {
	f.T.Helper()
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: f.name(name)}, Spec: ipv1.IPSpec{Address: addr}}
	f.G.Expect(k8s.Create(f.Ctx, ip)).To(Succeed())
	f.T.Cleanup(func() { _ = k8s.Delete(context.Background(), ip) })
	status.Address, status.Assigned = addr, true
	f.setStatus(ip.Name, func(s *ipv1.IPStatus) { *s = status })
	return ip.Name
}

// setStatus changes an IP's status as the controller (or another node's
// agent) would.
func (f *fixture) setStatus(name string, change func(*ipv1.IPStatus)) {
	f.T.Helper()
	ip := &ipv1.IP{}
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: name}, ip)).To(Succeed())
	orig := ip.DeepCopy()
	change(&ip.Status)
	f.G.Expect(k8s.Status().Patch(f.Ctx, ip, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))).To(Succeed())
}

// attachedNode is the IP's status.attachedNode as the API server has it.
func (f *fixture) attachedNode(name string) func() string {
	return func() string {
		ip := &ipv1.IP{}
		f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: name}, ip)).To(Succeed())
		return ip.Status.AttachedNode
	}
}

// attachedPod is the IP's status.attachedPod as the API server has it.
func (f *fixture) attachedPod(name string) func() string {
	return func() string {
		ip := &ipv1.IP{}
		f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: name}, ip)).To(Succeed())
		return ip.Status.AttachedPod
	}
}

// holder is the IP's status.pod.
func (f *fixture) holder(name string) string {
	ip := &ipv1.IP{}
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: name}, ip)).To(Succeed())
	return ip.Status.Pod
}

// placedHere creates an IP placed on this node, with its holder pod
// running here with podIP.
func (f *fixture) placedHere(name, addr, podIP string) string {
	f.T.Helper()
	pod := f.pod(name, thisNode, podIP)
	return f.ip(name, addr, ipv1.IPStatus{Node: thisNode, Pod: pod})
}

// attached creates an IP placed on this node and waits until the agent
// has attached it.
func (f *fixture) attached(name, addr, podIP string) string {
	f.T.Helper()
	ip := f.placedHere(name, addr, podIP)
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(f.holder(ip)))
	f.G.Expect(f.attachedNode(ip)()).To(Equal(thisNode))
	return ip
}

func assignment(addr, podIP string) netconf.Assignment {
	return netconf.Assignment{Address: netip.MustParseAddr(addr), PodIP: netip.MustParseAddr(podIP), Interface: uplink}
}

// An IP placed on this node, whose holder pod runs here with an address, is
// programmed as address -> pod on the configured uplink, and reported
// attached once the kernel has it.
func TestAttachesAnIPPlacedHere(t *testing.T) {
	f := newFixture(t)
	ip := f.placedHere("ip", "192.0.2.11", "10.244.1.11")

	want := assignment("192.0.2.11", "10.244.1.11")
	f.G.Eventually(dp.lastApplied, testenv.WaitFor).Should(ContainElement(want))
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(f.holder(ip)))
	f.G.Expect(f.attachedNode(ip)()).To(Equal(thisNode))
	f.G.Expect(dp.programmed(want.Address)).To(Equal(want))
}

// The agent forwards the address to the holder the controller chose, by
// UID: a pod created under the holder's name after the holder was deleted
// (by anyone allowed to create pods in the namespace, before the
// controller has looked at it) gets nothing until the controller names its
// UID; the address is released meanwhile, as for a holder that is gone.
func TestForwardsOnlyToTheHoldersUID(t *testing.T) {
	f := newFixture(t)
	holder := f.pod("uid", thisNode, "10.244.1.21")
	ns, podName, _ := strings.Cut(holder, "/")
	first := &corev1.Pod{}
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Namespace: ns, Name: podName}, first)).To(Succeed())
	ip := f.ip("uid", "192.0.2.120", ipv1.IPStatus{Node: thisNode, Pod: holder, PodUID: string(first.UID)})
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(holder))
	f.G.Expect(dp.programmed(netip.MustParseAddr("192.0.2.120"))).To(Equal(assignment("192.0.2.120", "10.244.1.21")))

	f.G.Expect(k8s.Delete(f.Ctx, first, client.GracePeriodSeconds(0))).To(Succeed())
	f.G.Expect(f.pod("uid", thisNode, "10.244.1.22")).To(Equal(holder))
	second := &corev1.Pod{}
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Namespace: ns, Name: podName}, second)).To(Succeed())
	f.G.Expect(second.UID).NotTo(Equal(first.UID))
	f.G.Eventually(f.attachedNode(ip), testenv.WaitFor).Should(BeEmpty(), "the holder is gone: released")
	f.G.Consistently(func() netip.Addr { return dp.programmed(netip.MustParseAddr("192.0.2.120")).PodIP }, quiet, 50*time.Millisecond).
		ShouldNot(Equal(netip.MustParseAddr("10.244.1.22")), "forwarded to a pod the controller did not choose")

	f.setStatus(ip, func(s *ipv1.IPStatus) { s.PodUID = string(second.UID) })
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(holder))
	f.G.Expect(dp.programmed(netip.MustParseAddr("192.0.2.120"))).To(Equal(assignment("192.0.2.120", "10.244.1.22")))
}

// The agent programs only what is placed on its node and not attached
// elsewhere, and never touches another node's report.
func TestLeavesOtherNodesIPsAlone(t *testing.T) {
	f := newFixture(t)
	here, there := f.pod("here", thisNode, "10.244.1.12"), f.pod("there", otherNode, "10.244.2.12")
	noAddress := f.pod("starting", thisNode, "")
	cases := []struct {
		addr   string
		status ipv1.IPStatus
	}{
		// Placed on another node.
		{"192.0.2.21", ipv1.IPStatus{Node: otherNode, Pod: there}},
		// Placed on another node that has already attached it.
		{"192.0.2.22", ipv1.IPStatus{Node: otherNode, Pod: there, AttachedNode: otherNode}},
		// Placed here, but the previous node has not released it yet.
		{"192.0.2.23", ipv1.IPStatus{Node: thisNode, Pod: here, AttachedNode: otherNode}},
		// Placed here, but the holder runs elsewhere (a stale placement).
		{"192.0.2.24", ipv1.IPStatus{Node: thisNode, Pod: there}},
		// Placed here, but the holder has no address yet.
		{"192.0.2.25", ipv1.IPStatus{Node: thisNode, Pod: noAddress}},
		// Placed here, but the holder pod does not exist.
		{"192.0.2.26", ipv1.IPStatus{Node: thisNode, Pod: "default/" + f.name("gone")}},
	}
	ips := make([]string, len(cases))
	for i, c := range cases {
		ips[i] = f.ip(c.addr, c.addr, c.status)
	}
	f.G.Consistently(func(g Gomega) {
		for i, c := range cases {
			g.Expect(dp.everApplied(netip.MustParseAddr(c.addr))).To(BeFalse(), c.addr)
			g.Expect(f.attachedNode(ips[i])()).To(Equal(c.status.AttachedNode), c.addr)
		}
	}, quiet, 100*time.Millisecond).Should(Succeed())
}

// An address moving here from another node is programmed here only once
// the other node has released it: never two nodes answering at once.
func TestTakesOverOnlyAfterTheOtherNodeReleased(t *testing.T) {
	f := newFixture(t)
	pod := f.pod("app", thisNode, "10.244.1.13")
	ip := f.ip("ip", "192.0.2.13", ipv1.IPStatus{Node: thisNode, Pod: pod, AttachedNode: otherNode})
	want := assignment("192.0.2.13", "10.244.1.13")
	f.G.Consistently(func() bool { return dp.everApplied(want.Address) }, quiet, 100*time.Millisecond).Should(BeFalse())

	f.setStatus(ip, func(s *ipv1.IPStatus) { s.AttachedNode = "" }) // the other agent releases it
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(pod))
	f.G.Expect(f.attachedNode(ip)()).To(Equal(thisNode))
	f.G.Expect(dp.programmed(want.Address)).To(Equal(want))
}

// An IP that moved to another node is removed from the kernel, and the
// agent withdraws its report only once the kernel no longer has it: the
// other node must not attach it while this one still answers.
func TestReleasesAnIPThatMovedAway(t *testing.T) {
	f := newFixture(t)
	ip := f.attached("ip", "192.0.2.14", "10.244.1.14")
	addr := netip.MustParseAddr("192.0.2.14")
	there := f.pod("there", otherNode, "10.244.2.14")

	release := dp.linger(t, addr)
	f.setStatus(ip, func(s *ipv1.IPStatus) { s.Node, s.Pod = otherNode, there })
	f.G.Eventually(dp.lastApplied, testenv.WaitFor).ShouldNot(ContainElement(HaveField("Address", addr)))
	f.G.Consistently(f.attachedNode(ip), quiet, 100*time.Millisecond).Should(Equal(thisNode),
		"released while the kernel still had the address")

	f.G.Expect(f.attachedPod(ip)()).To(BeEmpty(), "the kernel no longer forwards to the pod")

	release()
	f.G.Eventually(f.attachedNode(ip), testenv.WaitFor).Should(BeEmpty())
	f.G.Expect(f.attachedPod(ip)()).To(BeEmpty())
	f.G.Expect(dp.programmed(addr)).To(BeZero())
}

// Without its Lease the agent answers for nothing: fencing flushes the
// kernel, every reconcile programs nothing, nothing is reported attached
// and what was reported is withdrawn. With the Lease back, it attaches
// again.
func TestAnswersForNothingWithoutTheLease(t *testing.T) {
	f := newFixture(t)
	before := f.attached("before", "192.0.2.16", "10.244.1.16")
	t.Cleanup(func() { lease.held.Store(true); agent.Regained() })

	flushes := dp.flushCount()
	lease.held.Store(false)
	agent.Fence() // what the heartbeat calls when the Lease lapses
	f.G.Expect(dp.flushCount()).To(Equal(flushes + 1))
	f.G.Expect(dp.programmed(netip.MustParseAddr("192.0.2.16"))).To(BeZero())

	during := f.placedHere("during", "192.0.2.17", "10.244.1.17")
	f.G.Eventually(dp.lastApplied, testenv.WaitFor).Should(BeEmpty())
	f.G.Eventually(f.attachedNode(before), testenv.WaitFor).Should(BeEmpty())
	f.G.Consistently(func(g Gomega) {
		g.Expect(dp.lastApplied()).To(BeEmpty())
		g.Expect(f.attachedNode(during)()).To(BeEmpty())
		g.Expect(f.attachedNode(before)()).To(BeEmpty())
	}, quiet, 100*time.Millisecond).Should(Succeed())

	lease.held.Store(true)
	agent.Regained()
	f.G.Eventually(f.attachedPod(before), testenv.WaitFor).Should(Equal(f.holder(before)))
	f.G.Eventually(f.attachedPod(during), testenv.WaitFor).Should(Equal(f.holder(during)))
}

// An address the kernel has but forwarding to another pod address than the
// holder's is claimed (the node may answer for it) but not confirmed:
// attachedPod stays empty. Drift after the confirmation withdraws
// attachedPod, never attachedNode while part of it is left.
func TestPartialProgrammingIsNotReported(t *testing.T) {
	f := newFixture(t)
	addr := netip.MustParseAddr("192.0.2.18")
	fix := dp.forwardElsewhere(t, addr, netip.MustParseAddr("10.244.9.9"))
	ip := f.placedHere("ip", addr.String(), "10.244.1.18")

	f.G.Eventually(dp.programmed, testenv.WaitFor).WithArguments(addr).Should(HaveField("PodIP", netip.MustParseAddr("10.244.9.9")))
	f.G.Consistently(func(g Gomega) {
		g.Expect(f.attachedNode(ip)()).To(Equal(thisNode))
		g.Expect(f.attachedPod(ip)()).To(BeEmpty())
	}, quiet, 100*time.Millisecond).Should(Succeed())

	fix()
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(f.holder(ip)))

	fix = dp.forwardElsewhere(t, addr, netip.MustParseAddr("10.244.9.9"))
	f.G.Eventually(dp.programmed, testenv.WaitFor).WithArguments(addr).Should(HaveField("PodIP", netip.MustParseAddr("10.244.9.9")))
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(BeEmpty())
	f.G.Consistently(f.attachedNode(ip), quiet, 100*time.Millisecond).Should(Equal(thisNode))
	fix()
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(f.holder(ip)))
}

// An address the kernel refuses is reported to the user as a Warning
// Event on the IP, and not reported attached.
func TestReportsAttachFailures(t *testing.T) {
	f := newFixture(t)
	addr := netip.MustParseAddr("192.0.2.19")
	fix := dp.fail(t, addr, errors.New("address configured by someone else on eth-test"))
	ip := f.placedHere("ip", addr.String(), "10.244.1.19")

	f.G.Eventually(func() []eventsv1.Event { return ipEvents(f.Ctx, ip) }, testenv.WaitFor).Should(ContainElement(And(
		HaveField("Type", corev1.EventTypeWarning),
		HaveField("Reason", "AttachFailed"),
		HaveField("Note", "Node node-a could not attach 192.0.2.19: address configured by someone else on eth-test"),
	)))
	f.G.Expect(f.attachedPod(ip)()).To(BeEmpty())

	fix()
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(f.holder(ip)))
}

// ipEvents are the Events about an IP (cluster-scoped objects' Events are
// in the default namespace).
func ipEvents(ctx context.Context, name string) []eventsv1.Event {
	list := &eventsv1.EventList{}
	_ = k8s.List(ctx, list, client.InNamespace("default"))
	var events []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "IP" && e.Regarding.Name == name {
			events = append(events, e)
		}
	}
	return events
}

// A node given many IPs at once (a rollout, or every IP of a failed node
// moving to its standby) claims them all at once, and confirms them all at
// once: one write after the other, on a slow API server, the last of a
// failed node's fifty IPs would wait for every other's round trips.
func TestClaimsAndConfirmsManyIPsTogether(t *testing.T) {
	f := newFixture(t)
	t.Cleanup(func() { statusWrites.delay.Store(0); lease.held.Store(true); agent.Regained() })
	// Without the Lease nothing is claimed: the IPs wait, all placed here.
	lease.held.Store(false)
	const n = 6
	names := make([]string, n)
	for i := range n {
		names[i] = f.placedHere(fmt.Sprintf("many%d", i), fmt.Sprintf("192.0.2.%d", 50+i), fmt.Sprintf("10.244.1.%d", 50+i))
	}
	f.G.Eventually(func(g Gomega) {
		for _, name := range names {
			ip := agentHas(name)
			g.Expect(ip).NotTo(BeNil(), "in the agent's informers")
			g.Expect(ip.Status.Node).To(Equal(thisNode))
		}
	}, testenv.WaitFor).Should(Succeed())
	f.G.Expect(f.attachedNode(names[0])()).To(BeEmpty())

	statusWrites.delay.Store(int64(300 * time.Millisecond))
	statusWrites.most.Store(0)
	lease.held.Store(true)
	agent.Regained()
	for _, name := range names {
		f.G.Eventually(f.attachedPod(name), testenv.WaitFor).Should(Equal(f.holder(name)))
	}
	f.G.Expect(statusWrites.most.Load()).To(BeNumerically(">=", n), "claims (then confirmations) in flight at once")
}
