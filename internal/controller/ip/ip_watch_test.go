package ip

import (
	"testing"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/testenv"
)

// A node's label change requeues only the IPs the node takes part in
// (placed there, or claimed by a pod running there) whose pool selected
// the node before or selects it now, not both; not every IP.
func TestNodeLabelChangeRequeuesOnlyTheIPsItConcerns(t *testing.T) {
	f := newFixture(t)
	sel := func(zone string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"zone-" + f.ID: zone}}
	}
	pool := func(name, cidr string, s *metav1.LabelSelector) string {
		p := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: f.name(name)}, Spec: ipv1.IPPoolSpec{Addresses: []string{cidr},
			NodeSelector: s, Claimants: &ipv1.PoolClaimants{Namespaces: []string{"default"}}}}
		f.Create(p)
		return p.Name
	}
	poolA, poolB, poolAll := pool("a", "192.0.2.160/30", sel("a")), pool("b", "192.0.2.164/30", sel("b")), pool("all", "192.0.2.168/30", nil)
	here, there := f.node(f.name("here")), f.node(f.name("there"))
	ip := func(name, pool, node, podIP string) string {
		ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: f.name(name)}, Spec: ipv1.IPSpec{Pool: pool}}
		f.Create(ip)
		f.pod(f.name(name+"-pod"), ip.Name, node, podIP)
		return ip.Name
	}
	ipA, ipB, ipAll := ip("ip-a", poolA, here, "203.0.113.161"), ip("ip-b", poolB, here, "203.0.113.165"), ip("ip-all", poolAll, here, "203.0.113.169")
	ipElsewhere := ip("ip-elsewhere", poolA, there, "203.0.113.162")
	lease := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &here}}
	f.G.Eventually(func() []reconcile.Request { return reconciler.heartbeatToIPs(f.Ctx, lease) }, testenv.WaitFor).
		Should(ConsistOf(request(ipA), request(ipB), request(ipAll)), "the IPs claimed from the node, not %s", ipElsewhere)

	node := func(labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: here, Labels: labels}}
	}
	zone := "zone-" + f.ID
	f.G.Eventually(func() []reconcile.Request {
		return reconciler.relabelled(f.Ctx, node(map[string]string{zone: "a"}), node(map[string]string{zone: "b"}))
	}, testenv.WaitFor).Should(ConsistOf(request(ipA), request(ipB)), "pool a selected it, pool b selects it; the pool without selector both")
	f.G.Expect(reconciler.relabelled(f.Ctx, node(map[string]string{zone: "a"}), node(map[string]string{zone: "a", "other": "x"}))).
		To(BeEmpty(), "no pool's choice changed")
	f.G.Expect(reconciler.relabelled(f.Ctx, node(nil), node(nil))).To(BeEmpty(), "labels unchanged")

	// A pool's status write (the pool controller's, at every allocation)
	// requeues nothing; a spec change does.
	p := &ipv1.IPPool{}
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: poolA}, p)).To(Succeed())
	status := p.DeepCopy()
	status.Status.Allocated++
	status.ResourceVersion = "changed"
	f.G.Expect(poolChanged.Update(event.UpdateEvent{ObjectOld: p, ObjectNew: status})).To(BeFalse())
	spec := p.DeepCopy()
	spec.Generation++
	f.G.Expect(poolChanged.Update(event.UpdateEvent{ObjectOld: p, ObjectNew: spec})).To(BeTrue())
}
