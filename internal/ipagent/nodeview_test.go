package ipagent

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/agentkube"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/test/testenv"
)

// deployedAgent is an agent wired as cmd/ip-agent wires it (its caches,
// Duty and a real heartbeat) and connected as the deployed ip-agent of its
// node (its service account, token bound to the node, RBAC and admission
// policy of config/default), with a fake kernel.
type deployedAgent struct {
	node string
	r    *Reconciler
	hb   *heartbeat.Heartbeat
	duty *Duty
	dp   *fakeDataplane
	// seen are the names of every IP either of its informers delivered.
	mu   sync.Mutex
	seen map[string]bool
}

const agentNamespace = "kubext-system"

func startDeployedAgent(t *testing.T, node string) *deployedAgent {
	t.Helper()
	in := install{namespace: agentNamespace, namePrefix: "kubext-", dir: "config/default"}
	installAgentAccess(t, in)
	cfg := agentConfig(in, node)
	c, err := agentkube.New(cfg, agentScheme)
	if err != nil {
		t.Fatal(err)
	}
	leases, err := c.REST(coordinationv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	a := &deployedAgent{node: node, dp: newFakeDataplane(node), seen: map[string]bool{}}
	recorder := c.NewRecorder("ip-agent", logr.Discard())
	a.r = &Reconciler{Client: checkedClient{Client: c, d: a.dp}, Recorder: recorder,
		Log: ctrl.Log.WithName("ip-agent").WithValues("node", node), Node: node, Dataplane: a.dp, Interface: uplink, Resync: resync}
	if err := a.r.Setup(); err != nil {
		t.Fatal(err)
	}
	if a.duty, err = a.r.NewDuty(func() { a.hb.Wake() }); err != nil {
		t.Fatal(err)
	}
	// The agent's defaults: lease 2 s, renewed every 500 ms.
	a.hb, err = heartbeat.New(heartbeat.Config{
		Client: heartbeat.SendOnce(leases), Namespace: agentNamespace,
		Component: ipv1.AgentComponent, Node: node, Duration: 2 * time.Second, RenewInterval: 500 * time.Millisecond,
		OnLost: a.r.Fence, OnRegained: a.r.Regained, Needed: a.duty.Needed,
	})
	if err != nil {
		t.Fatal(err)
	}
	a.r.Lease = a.hb
	record := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { a.saw(o) },
		UpdateFunc: func(_, o any) { a.saw(o) },
		DeleteFunc: func(o any) { a.saw(o) },
	}
	for _, inf := range a.r.ips.informers() {
		if _, err := inf.AddEventHandler(record); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{a.r.Run, a.duty.Start, a.hb.Start, recorder.Run} {
		wg.Go(func() {
			if err := run(ctx); err != nil {
				t.Errorf("agent of %s: %v", node, err)
			}
		})
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if v := a.dp.protocolViolations(); len(v) > 0 {
			t.Errorf("protocol violations by the agent of %s: %q", node, v)
		}
	})
	return a
}

func (a *deployedAgent) saw(o any) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if ip, ok := o.(*ipv1.IP); ok {
		a.mu.Lock()
		a.seen[ip.Name] = true
		a.mu.Unlock()
	}
}

func (a *deployedAgent) sawIP(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen[name]
}

// leaseVersion is the resourceVersion of the node's heartbeat Lease on the
// API server ("" while there is none).
func leaseVersion(g Gomega, node string) string {
	l := &coordinationv1.Lease{}
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: agentNamespace, Name: heartbeat.LeaseName(ipv1.AgentComponent, node)}, l)
	if apierrors.IsNotFound(err) {
		return ""
	}
	g.Expect(err).NotTo(HaveOccurred())
	return l.ResourceVersion
}

// writesNothing checks that the node's heartbeat Lease does not change for
// window: its agent writes nothing.
func writesNothing(g Gomega, node string, window time.Duration, why string) {
	before := leaseVersion(g, node)
	g.Consistently(func(g Gomega) string { return leaseVersion(g, node) }, window, 100*time.Millisecond).
		Should(Equal(before), why)
}

// The agent, as deployed, sees only its own node's IPs, renews its heartbeat
// only while a pool selects its node or an IP names it (and at once when
// that starts), and still releases an IP that moved away from it.
func TestDeployedAgentSeesOnlyItsNode(t *testing.T) {
	f := newFixture(t)
	node, elsewhere := "node-own-"+f.ID, "node-elsewhere-"+f.ID
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	f.Create(n)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })
	a := startDeployedAgent(t, node)

	// Nothing selects the node: no Lease, not a write.
	g := f.G
	g.Consistently(func(g Gomega) string { return leaseVersion(g, node) }, 2*time.Second, 100*time.Millisecond).
		Should(BeEmpty(), "a node no pool selects writes no heartbeat")

	// A pool that selects other nodes changes nothing.
	label := "test.kubext.io/pool-" + f.ID
	pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: f.name("pool")}, Spec: ipv1.IPPoolSpec{
		Addresses:    []string{"198.51.100.0/28"},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{label: "yes"}},
	}}
	f.Create(pool)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pool) })
	g.Consistently(func(g Gomega) string { return leaseVersion(g, node) }, 1500*time.Millisecond, 100*time.Millisecond).
		Should(BeEmpty(), "the pool does not select this node")

	// The pool starts selecting the node: its agent renews within a second
	// or so (a watch event and a Wake; not a renewal interval later).
	labelNode := func(value string) {
		t.Helper()
		cur := &corev1.Node{}
		g.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: node}, cur)).To(Succeed())
		orig := cur.DeepCopy()
		if value == "" {
			delete(cur.Labels, label)
		} else {
			cur.Labels = map[string]string{label: value}
		}
		g.Expect(k8s.Patch(f.Ctx, cur, client.MergeFrom(orig))).To(Succeed())
	}
	start := time.Now()
	labelNode("yes")
	g.Eventually(a.hb.Held, 1500*time.Millisecond, 20*time.Millisecond).Should(BeTrue(), "renewing once a pool selects the node")
	t.Logf("selected -> heartbeat held after %s", time.Since(start).Round(time.Millisecond))
	g.Expect(leaseVersion(g, node)).NotTo(BeEmpty())
	// And it keeps renewing while selected.
	v := leaseVersion(g, node)
	g.Eventually(func(g Gomega) string { return leaseVersion(g, node) }, 2*time.Second, 50*time.Millisecond).ShouldNot(Equal(v))

	// Deselected: the hold lapses and nothing more is written.
	labelNode("")
	g.Eventually(a.hb.Held, 3*time.Second, 20*time.Millisecond).Should(BeFalse())
	writesNothing(g, node, 1500*time.Millisecond, "deselected: no more renewals")

	// An IP of another node (placed and attached there) never reaches this
	// agent, and does not wake it.
	otherPod := f.pod("other-holder", elsewhere, "10.0.9.9")
	other := f.ip("other", "192.0.2.210", ipv1.IPStatus{Node: elsewhere, Pod: otherPod, AttachedNode: elsewhere, AttachedPod: otherPod})
	f.setStatus(other, func(s *ipv1.IPStatus) { s.Standbys = []string{"default/x"} })
	writesNothing(g, node, time.Second, "another node's IP does not wake this one")

	// An IP placed here wakes it: it renews, claims and attaches.
	addr := "192.0.2.211"
	pod := f.pod("holder", node, "10.0.9.10")
	here := f.ip("here", addr, ipv1.IPStatus{Node: node, Pod: pod})
	g.Eventually(f.attachedPod(here), testenv.WaitFor).Should(Equal(pod))
	g.Expect(f.attachedNode(here)()).To(Equal(node))
	g.Expect(a.dp.programmed(netip.MustParseAddr(addr)).PodIP.String()).To(Equal("10.0.9.10"))

	// The controller asks the node to let go (status.node no longer names
	// it): the IP leaves the placed informer and stays in the attached
	// one, and the agent releases it.
	f.setStatus(here, func(s *ipv1.IPStatus) { s.Node = "" })
	g.Eventually(f.attachedNode(here), testenv.WaitFor).Should(BeEmpty(), "released although it is no longer placed here")
	g.Expect(a.dp.present(netip.MustParseAddr(addr))).To(BeFalse())
	// Nothing names the node now: it stops renewing.
	g.Eventually(a.hb.Held, 3*time.Second, 20*time.Millisecond).Should(BeFalse())
	writesNothing(g, node, time.Second, "nothing left to hold")

	g.Expect(a.sawIP(here)).To(BeTrue())
	g.Expect(a.sawIP(other)).To(BeFalse(), "another node's IP reached this agent's informers")
	g.Expect(slices.ContainsFunc(a.r.ips.list(), func(ip *ipv1.IP) bool { return ip.Name == other })).To(BeFalse())
}
