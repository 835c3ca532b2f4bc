package ipagent

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/agentkube"
	"github.com/kubext/kubext/internal/netconf"
	"github.com/kubext/kubext/test/testenv"
)

// The order of the protocol, checked at every Apply and status write by
// the fake dataplane (see fakeDataplane): the claim comes before the
// first Apply that programs the IP, the confirmation after the kernel has
// it.
func TestClaimsBeforeProgrammingAndConfirmsAfter(t *testing.T) {
	f := newFixture(t)
	addr := netip.MustParseAddr("192.0.2.31")
	fix := dp.fail(t, addr, netconfError("interface is down"))
	ip := f.placedHere("ip", addr.String(), "10.244.1.31")

	// Claimed though the kernel refuses it: the node may be answering in
	// part. Not confirmed.
	f.G.Eventually(f.attachedNode(ip), testenv.WaitFor).Should(Equal(thisNode))
	f.G.Consistently(f.attachedPod(ip), quiet, 100*time.Millisecond).Should(BeEmpty())
	f.G.Expect(dp.programmed(addr)).To(BeZero())

	fix()
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(f.holder(ip)))
	f.G.Expect(dp.everApplied(addr)).To(BeTrue())
}

type netconfError string

func (e netconfError) Error() string { return string(e) }

// A new holder on the same node: the agent withdraws attachedPod, repoints
// the kernel, and confirms the new holder; attachedNode stays throughout.
func TestRepointsToANewHolderOnTheSameNode(t *testing.T) {
	f := newFixture(t)
	ip := f.attached("ip", "192.0.2.32", "10.244.1.32")
	next := f.pod("next", thisNode, "10.244.1.33")

	f.setStatus(ip, func(s *ipv1.IPStatus) { s.Pod = next })
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(next))
	f.G.Expect(f.attachedNode(ip)()).To(Equal(thisNode))
	f.G.Expect(dp.programmed(netip.MustParseAddr("192.0.2.32"))).To(Equal(assignment("192.0.2.32", "10.244.1.33")))
}

// A pod on the host network is never a holder the node attaches: its
// address is the node's, so SNAT would send all of the node's traffic as
// the static IP. One Warning Event says so.
func TestNeverAttachesAHostNetworkPod(t *testing.T) {
	f := newFixture(t)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: f.name("host")},
		Spec: corev1.PodSpec{NodeName: thisNode, HostNetwork: true,
			Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
	}
	f.G.Expect(k8s.Create(f.Ctx, p)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
	orig := p.DeepCopy()
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP, p.Status.PodIPs = "10.0.0.34", []corev1.PodIP{{IP: "10.0.0.34"}}
	f.G.Expect(k8s.Status().Patch(f.Ctx, p, client.MergeFrom(orig))).To(Succeed())
	ip := f.ip("ip", "192.0.2.34", ipv1.IPStatus{Node: thisNode, Pod: p.Namespace + "/" + p.Name})

	warning := And(HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", "HostNetworkPod"))
	f.G.Eventually(func() []eventsv1.Event { return ipEvents(f.Ctx, ip) }, testenv.WaitFor).Should(ContainElement(warning))
	f.G.Consistently(func(g Gomega) {
		g.Expect(dp.everApplied(netip.MustParseAddr("192.0.2.34"))).To(BeFalse())
		g.Expect(f.attachedNode(ip)()).To(BeEmpty())
		g.Expect(ipEvents(f.Ctx, ip)).To(HaveExactElements(warning), "one Event, not one per resync")
	}, quiet, 100*time.Millisecond).Should(Succeed())
}

// racingClient is an agent's client that lets the controller write first:
// before the agent's first status write, it runs controllerWrites.
type racingClient struct {
	Client
	once             *sync.Once
	controllerWrites func()
}

func (c racingClient) Patch(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, obj runtime.Object, subresource ...string) error {
	c.once.Do(c.controllerWrites)
	return c.Client.Patch(ctx, namespace, name, pt, data, obj, subresource...)
}

// watching is r, set up, with its informers running until the test ends
// and synced: its passes (reconcile) can be run one by one.
func watching(t *testing.T, r *Reconciler) *Reconciler {
	t.Helper()
	if err := r.Setup(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if !r.watch(ctx) {
		t.Fatal("the informers did not sync")
	}
	return r
}

// adminAgentClient is an agent's client with the test's (admin) rights.
func adminAgentClient(t *testing.T) *agentkube.Client {
	t.Helper()
	c, err := agentkube.New(testEnv.Config, agentScheme)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The controller moves the IP between the agent's read and its claim: the
// claim conflicts, and the agent never programs the IP.
func TestAConflictingMoveIsNeverProgrammed(t *testing.T) {
	f := newFixture(t)
	const node = "node-c"
	pod := f.pod("app", node, "10.244.3.35")
	there := f.pod("there", otherNode, "10.244.2.35")
	ip := f.ip("ip", "192.0.2.35", ipv1.IPStatus{Node: node, Pod: pod})
	nodeDP := newFakeDataplane(node)
	raced := false
	r := watching(t, &Reconciler{
		Client: racingClient{Client: adminAgentClient(t), once: &sync.Once{}, controllerWrites: func() {
			f.setStatus(ip, func(s *ipv1.IPStatus) { s.Node, s.Pod = otherNode, there })
			raced = true
		}},
		Recorder:  events.NewFakeRecorder(16),
		Node:      node,
		Dataplane: nodeDP,
		Lease:     heldLease{},
		Interface: uplink,
	})
	for range 3 {
		_, err := r.reconcile(f.Ctx)
		f.G.Expect(err).NotTo(HaveOccurred())
	}
	f.G.Expect(raced).To(BeTrue(), "the agent never tried to claim")
	f.G.Expect(nodeDP.everApplied(netip.MustParseAddr("192.0.2.35"))).To(BeFalse())
	f.G.Expect(f.attachedNode(ip)()).To(BeEmpty())
	f.G.Expect(nodeDP.protocolViolations()).To(BeEmpty())
}

type heldLease struct{}

func (heldLease) Held() bool { return true }

// stuckDataplane's Apply hangs until its context ends.
type stuckDataplane struct {
	*fakeDataplane
	entered, cancelled chan struct{}
}

func (d *stuckDataplane) Apply(ctx context.Context, _ []netconf.Assignment) (netconf.Report, error) {
	close(d.entered)
	<-ctx.Done()
	close(d.cancelled)
	return netconf.Report{}, ctx.Err()
}

// Fencing does not wait for a programming pass that hangs: it fences at
// once and cancels the pass.
func TestFenceDoesNotWaitForAHungApply(t *testing.T) {
	f := newFixture(t)
	stuck := &stuckDataplane{fakeDataplane: newFakeDataplane("node-d"), entered: make(chan struct{}), cancelled: make(chan struct{})}
	r := watching(t, &Reconciler{Client: adminAgentClient(t), Recorder: events.NewFakeRecorder(16), Node: "node-d", Dataplane: stuck, Lease: heldLease{}})
	go func() { _, _ = r.reconcile(context.Background()) }()
	<-stuck.entered

	fenced := make(chan struct{})
	go func() {
		r.Fence()
		close(fenced)
	}()
	f.G.Eventually(fenced, time.Second).Should(BeClosed())
	f.G.Expect(stuck.flushCount()).To(Equal(1))
	f.G.Eventually(stuck.cancelled, time.Second).Should(BeClosed())
}
