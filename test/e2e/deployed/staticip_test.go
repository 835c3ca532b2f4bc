package deployed

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/lab/labnet"
	"github.com/kubext/kubext/test/staticip"
)

// A static IP through the deployed manager and ip-agents: the address
// answers from the holder pod in both directions, and moves to the standby
// when the holder's node is killed (its ip-agent, and a manager replica if
// one ran there, die with it). The revived node's agent comes back by
// itself and stays silent.
func TestDeployedStaticIPFailsOver(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	ctx := context.Background()
	c := adminClient(t)
	pods, err := theLab.StartPodNetwork(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	addr := netip.MustParseAddr("203.0.113.100")
	staticip.WatchSplits(t, theLab.Net, addr)

	pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "deployed"},
		Spec: ipv1.IPPoolSpec{Addresses: []string{"203.0.113.96/28"}, Claimants: &ipv1.PoolClaimants{Namespaces: []string{"default"}}}}
	g.Expect(c.Create(ctx, pool)).To(Succeed())
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "partner"}, Spec: ipv1.IPSpec{Address: addr.String()}}
	g.Expect(c.Create(ctx, ip)).To(Succeed())
	dep := staticip.Deployment("partner-app", "partner", 2)
	g.Expect(c.Create(ctx, dep)).To(Succeed())
	t.Cleanup(func() {
		_ = c.Delete(ctx, dep)
		_ = c.Delete(ctx, ip)
	})

	get := func(g Gomega) *ipv1.IP {
		got := &ipv1.IP{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "partner"}, got)).To(Succeed())
		return got
	}
	var holder, standby, holderNode string
	t.Cleanup(func() {
		if t.Failed() {
			// What the controller saw: the claimants, their nodes and the
			// agents' heartbeats (kubectl kubext ip explain's facts).
			for _, args := range [][]string{
				{"get", "pods", "-o", "wide", "-n", "default"},
				{"get", "ip", "partner", "-o", "yaml"},
				{"get", "leases", "-n", lab.SystemNamespace, "-o", "wide"},
				{"get", "nodes", "-o", "custom-columns=NAME:.metadata.name,READY:.status.conditions[-1].status,TAINTS:.spec.taints[*].key"},
			} {
				out, err := theLab.Kubectl(ctxBG, args...)
				t.Logf("kubectl %v: %v\n%s", args, err, out)
			}
		}
	})
	g.Eventually(func(g Gomega) {
		got := get(g)
		g.Expect(staticip.Ready(got)).To(BeTrue(), "IP not Ready: %v", got.Status.Conditions)
		g.Expect(got.Status.Standbys).To(HaveLen(1))
		holder, standby, holderNode = staticip.PodName(got.Status.Pod), staticip.PodName(got.Status.Standbys[0]), got.Status.Node
	}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
	// As deployed, the API server put the finalizer on at creation (the
	// manager wrote none), and the holder's ip-agent, under its own
	// identity and admission policy, wrote Ready with its confirmation
	// (it owns fields of the Ready condition; the manager, which wrote
	// Ready=False before, keeps the fields it set then).
	got := get(g)
	g.Expect(got.Finalizers).To(ContainElement(ipv1.Finalizer))
	g.Expect(fieldOwners(got, "", `"f:finalizers"`)).NotTo(ContainElement("manager"), "the manager added the finalizer itself")
	g.Expect(fieldOwners(got, "status", `"k:{\"type\":\"Ready\"}"`)).To(ContainElement("ip-agent"), "who wrote Ready")

	outside := theLab.Net.ClientNamespace()
	g.Eventually(func() (string, error) { return staticip.AskFrom(outside, addr, time.Second) }, 30*time.Second, 100*time.Millisecond).Should(Equal(holder))
	// The pod network may register the holder's namespace a moment after
	// the pod answers through it (CI failed once on "no namespace"): wait.
	g.Eventually(func() (string, error) { return staticip.SourceSeenByClient(theLab, pods, "default/"+holder) },
		10*time.Second, 100*time.Millisecond).Should(Equal(addr.String()))

	// The manager's replicas are spread by a preferred anti-affinity only:
	// when both run on the holder's node, killing it leaves no manager to
	// fail over (until the pods are evicted, minutes later). Move the
	// address to the standby first then, whose node has no manager.
	if managersOn(g, holderNode) == 2 {
		t.Logf("both manager replicas run on %s: moving the address to the standby first", holderNode)
		cur := get(g)
		patch := client.RawPatch("application/merge-patch+json",
			fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, ipv1.AnnotationMoveTo, cur.Status.Standbys[0]))
		g.Expect(c.Patch(ctx, cur, patch)).To(Succeed())
		holder, standby = standby, holder
		g.Eventually(func(g Gomega) {
			got := get(g)
			g.Expect(staticip.Ready(got)).To(BeTrue())
			g.Expect(staticip.PodName(got.Status.Pod)).To(Equal(holder))
			g.Expect(got.Status.Standbys).To(HaveLen(1))
			holderNode = got.Status.Node
		}, time.Minute, 250*time.Millisecond).Should(Succeed())
		g.Eventually(func() (string, error) { return staticip.AskFrom(outside, addr, time.Second) }, 30*time.Second, 100*time.Millisecond).Should(Equal(holder))
	}
	agent := podOf("ip-agent", holderNode)
	g.Expect(agent).NotTo(BeEmpty())
	revive := killNode(t, holderNode)
	start := time.Now()
	g.Expect(deployed.Running()).NotTo(ContainElement(agent), "the killed node's ip-agent still runs")
	// Lease expiry of the dead agent, and of the manager's leader if it ran
	// there (15 s as deployed).
	g.Eventually(func() (string, error) {
		return staticip.AskFrom(outside, addr, 200*time.Millisecond)
	}, 90*time.Second, 100*time.Millisecond).Should(Equal(standby))
	t.Logf("the standby answered %s after the holder's node was killed", time.Since(start).Round(10*time.Millisecond))

	revive()
	g.Eventually(func() []string { return deployed.Running() }, time.Minute, 250*time.Millisecond).Should(ContainElement(agent),
		"the revived node's ip-agent runs again")
	g.Consistently(func(g Gomega) {
		on := answersOn(addr)
		g.Expect(on).To(HaveLen(1))
		g.Expect(on).NotTo(ContainElement(holderNode))
		g.Expect(staticip.AskFrom(outside, addr, time.Second)).To(Equal(standby))
	}, 3*time.Second, 250*time.Millisecond).Should(Succeed())
}

// answersOn lists the nodes whose namespace has the address.
func answersOn(addr netip.Addr) []string {
	var out []string
	for _, n := range theLab.Nodes {
		_ = labnet.Do(theLab.Net.NodeNamespace(n), func() error {
			addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
			if err != nil {
				return err
			}
			if slices.ContainsFunc(addrs, func(a netlink.Addr) bool { return a.IP.Equal(addr.AsSlice()) }) {
				out = append(out, n)
			}
			return nil
		})
	}
	return out
}

// managersOn counts the manager replicas scheduled on node.
func managersOn(g Gomega, node string) int {
	cs, err := theLab.Clientset()
	g.Expect(err).NotTo(HaveOccurred())
	pods, err := cs.CoreV1().Pods("kubext-system").List(ctxBG, metav1.ListOptions{LabelSelector: "control-plane=controller-manager"})
	g.Expect(err).NotTo(HaveOccurred())
	n := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}

// fieldOwners are the field managers of obj's managedFields entries for
// subresource sub ("" for the object itself) whose fields contain field
// (a fragment of fieldsV1's JSON, e.g. "f:finalizers").
func fieldOwners(obj client.Object, sub, field string) []string {
	var out []string
	for _, m := range obj.GetManagedFields() {
		if m.Subresource == sub && m.FieldsV1 != nil && strings.Contains(m.FieldsV1.GetRawString(), field) {
			out = append(out, m.Manager)
		}
	}
	return out
}
