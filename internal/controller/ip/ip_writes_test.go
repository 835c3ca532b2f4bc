package ip

import (
	"context"
	"net/netip"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/ipam"
	"github.com/kubext/kubext/internal/ipcond"
	"github.com/kubext/kubext/test/testenv"
)

// The manager's client QPS bounds how fast IPs converge at scale
// (docs/benchmarks.md, "Static IP at scale"): every write per IP counts.
// An IP that an agent confirms in the steps the real agent takes — its
// claim before it sees the holder pod, then the pod, then its witnesses
// vouching — costs the manager its reservation and one status write for
// allocation and placement: the finalizer comes with the IP's creation
// (the IP finalizer policy), the agent's confirmation carries Attached and
// Ready (internal/ipcond), its intermediate reports and the hold's change
// of rule write nothing, and a reconcile with nothing to change writes
// nothing. An agent that confirms without the conditions (an older one, or
// one whose policy refuses them) costs one status write more: Ready.
func TestWritesPerIPThroughConvergence(t *testing.T) {
	for _, tc := range []struct {
		name       string
		conditions bool
		addresses  string
		want       []string
	}{
		{"the agent writes Attached and Ready", true, "203.0.113.96/30", []string{"patch status"}},
		{"the agent writes no conditions", false, "203.0.113.100/30", []string{"patch status", "patch status"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			name, address := convergeStepByStep(t, f, tc.conditions, tc.addresses)
			f.G.Expect(managerWrites.Of(name)).To(Equal(tc.want), "the manager's writes on the IP")
			f.G.Expect(managerWrites.Of(ipam.Name(netip.MustParseAddr(address)))).To(Equal([]string{"create"}), "the manager's writes on the reservation")
			// The attachment is told, whoever wrote Attached.
			f.G.Eventually(func() bool { return ipEvent(f.Ctx, name, "Attached") != nil }, testenv.WaitFor).Should(BeTrue(), "the Attached Event")
			// Events cost writes too: one on the IP for the reservation,
			// the placement and the attachment together.
			f.G.Expect(ipEvents(f.Ctx, name)).To(ConsistOf("Attached"), "the IP's Events")
			f.G.Expect(ipEvent(f.Ctx, name, "Attached").Note).To(MatchRegexp(`^Node \S+ answers for %s from pool \S+, held by pod default/\S+$`, regexp.QuoteMeta(address)))
		})
	}
}

// convergeStepByStep places an IP of a Witness pool on a node and makes
// its agent's reports one at a time, so that the manager sees each:
// the claim, the confirmation (with the conditions, as the agent writes
// them, or without), its witnesses vouching; then a change that is no
// change. It returns the IP's name and address.
func convergeStepByStep(t *testing.T, f *fixture, conditions bool, addresses string) (name, address string) {
	pool := f.name("pool")
	name = f.name("ip")
	f.Create(&ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: ipv1.IPPoolSpec{Addresses: []string{addresses},
		Claimants: &ipv1.PoolClaimants{Namespaces: []string{"default"}}, Failover: ipv1.FailoverWitness}})
	holder, other := f.node(f.name("h")), f.node(f.name("w"))
	// Heartbeats only: the test makes the holder's reports itself.
	for _, n := range []string{holder, other} {
		renewing(t, n)
	}
	f.G.Eventually(func() bool { return reconciler.Health.Healthy(holder) && reconciler.Health.Healthy(other) }, testenv.WaitFor).Should(BeTrue())
	// The pod first, seen by the manager before the IP: otherwise the IP is
	// allocated before it has a claimant, and says so (a write).
	p := f.pod(f.name("app"), name, holder, "192.0.2.31")
	time.Sleep(300 * time.Millisecond)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	f.G.Eventually(func(g Gomega) {
		ip := f.ip(name)
		g.Expect(ip.Status.Node).To(Equal(holder))
		g.Expect(ip.Status.Witnesses).NotTo(BeEmpty())
		g.Expect(condition(ip, ipv1.ConditionAttached).Reason).To(Equal(ipv1.ReasonWaitingForAgent))
	}, testenv.WaitFor).Should(Succeed())
	address = f.ip(name).Status.Address

	// settled waits until the manager has had time to react to a report.
	settled := func() { time.Sleep(700 * time.Millisecond) }
	report := func(change func(*ipv1.IP)) {
		t.Helper()
		f.G.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			ip := f.ip(name)
			orig := ip.DeepCopy()
			change(ip)
			return k8s.Status().Patch(f.Ctx, ip, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		})).To(Succeed())
	}
	// The claim, on the Lease (generation 0), before the pod is seen.
	report(func(ip *ipv1.IP) { ip.Status.AttachedNode = holder })
	settled()
	f.G.Expect(condition(f.ip(name), ipv1.ConditionReady).Status).To(Equal(metav1.ConditionFalse), "not Ready before the pod is confirmed")
	// The pod.
	report(func(ip *ipv1.IP) {
		ip.Status.AttachedPod = p.Namespace + "/" + p.Name
		if conditions {
			f.G.Expect(ipcond.AgentMayConfirm(ip, holder)).To(BeTrue())
			ipcond.Confirm(ip)
		}
	})
	f.readyAttachedOn(name, holder)
	settled()
	// The witnesses vouch: the hold's rule changes from Lease to witnesses.
	report(func(ip *ipv1.IP) { ip.Status.AttachedGeneration = 3 })
	settled()
	// Nothing to change.
	touch(f, name)
	settled()

	ip := f.ip(name)
	f.G.Expect(condition(ip, ipv1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	f.G.Expect(condition(ip, ipv1.ConditionReady).ObservedGeneration).To(Equal(ip.Generation))
	return name, address
}

// A live IP keeps its finalizer: an update that drops it (a server-side
// apply of a manifest without it, a merge patch) gets it back from the API
// server, so that no deletion can skip the detach and the release.
func TestLiveIPKeepsItsFinalizer(t *testing.T) {
	f := newFixture(t)
	name := f.name("ip")
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{"example.com/keep"}}, Spec: ipv1.IPSpec{Pool: f.name("nopool")}})
	f.G.Expect(f.ip(name).Finalizers).To(ConsistOf("example.com/keep", ipv1.Finalizer), "added at creation, beside the user's")
	ip := f.ip(name)
	f.G.Expect(k8s.Patch(f.Ctx, ip, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))).To(Succeed())
	f.G.Expect(ip.Finalizers).To(Equal([]string{ipv1.Finalizer}), "the patch's answer")
	f.G.Expect(managerWrites.Of(name)).NotTo(ContainElement("patch"), "the controller added no finalizer")
}

// Without the policy (not installed, or lifted) the controller puts the
// finalizer on before it allocates anything.
func TestFinalizerWithoutThePolicy(t *testing.T) {
	f := newFixture(t)
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: "ip-finalizer.ip.kubext.io"}, binding)).To(Succeed())
	f.G.Expect(k8s.Delete(f.Ctx, binding)).To(Succeed())
	t.Cleanup(func() {
		binding.ObjectMeta = metav1.ObjectMeta{Name: binding.Name}
		f.G.Expect(k8s.Create(context.Background(), binding)).To(Succeed())
		f.G.Expect(testenv.WaitIPFinalizerPolicy(context.Background(), k8s)).To(Succeed())
	})
	// Until the API server has dropped the policy, a new IP still gets it.
	f.G.Eventually(func(g Gomega) {
		probe := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: f.name("probe")}, Spec: ipv1.IPSpec{Pool: "probe"}}
		g.Expect(k8s.Create(f.Ctx, probe, client.DryRunAll)).To(Succeed())
		g.Expect(probe.Finalizers).To(BeEmpty())
	}, testenv.WaitFor).Should(Succeed())

	pool, name := f.name("pool"), f.name("ip")
	f.Create(&ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: ipv1.IPPoolSpec{Addresses: []string{"203.0.113.104/29"},
		Claimants: &ipv1.PoolClaimants{Namespaces: []string{"default"}}}})
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	f.G.Eventually(func(g Gomega) {
		ip := f.ip(name)
		g.Expect(ip.Finalizers).To(ContainElement(ipv1.Finalizer))
		g.Expect(ip.Status.Address).NotTo(BeEmpty())
	}, testenv.WaitFor).Should(Succeed())
	f.G.Expect(managerWrites.Of(name)).To(HaveExactElements("patch", "patch status"), "the finalizer first, then the allocation")
}

// renewing renews node's agent heartbeat until the test ends, and reports
// nothing about IPs.
func renewing(t *testing.T, node string) {
	ctx, cancel := context.WithCancel(context.Background())
	a := &fakeAgent{node: node}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			a.renew(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// An address reserved with nobody to place it on is told on its own.
func TestReservationWithoutClaimantIsTold(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.Create(&ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: ipv1.IPPoolSpec{Addresses: []string{"203.0.113.112/30"},
		Claimants: &ipv1.PoolClaimants{Namespaces: []string{"default"}}}})
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	f.G.Eventually(func() *eventsv1.Event { return ipEvent(f.Ctx, name, "Allocated") }, testenv.WaitFor).ShouldNot(BeNil())
	address := f.ip(name).Status.Address
	f.G.Expect(ipEvent(f.Ctx, name, "Allocated").Note).To(Equal("Reserved " + address + " from pool " + pool))
	f.G.Expect(ipEvents(f.Ctx, name)).To(ConsistOf("Allocated"))
}
