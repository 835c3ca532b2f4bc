package ip

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/testenv"
)

// An agent renews its heartbeat only while its node has something to do
// (internal/ipagent Duty): a node whose agent has never renewed — no Lease
// at all — is no candidate, and an IP claimed only from there waits,
// placed nowhere. Once the agent renews, the IP is placed there without
// waiting for a resync (the Lease's first renewal requeues the node's
// claims).
func TestNoLeaseIsNoCandidateUntilTheAgentRenews(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.pool(pool, "192.0.2.128/29")
	node := f.node(f.name("dormant"))
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	f.pod(f.name("app"), name, node, "203.0.113.77")

	f.G.Eventually(func() string { return f.ip(name).Status.Address }, testenv.WaitFor).ShouldNot(BeEmpty())
	f.G.Consistently(func(g Gomega) {
		ip := f.ip(name)
		g.Expect(ip.Status.Node).To(BeEmpty(), "placed on a node whose agent never renewed")
		g.Expect(ip.Status.AttachedNode).To(BeEmpty())
	}, 2*time.Second, 100*time.Millisecond).Should(Succeed())

	start := time.Now()
	startAgent(t, node)
	f.G.Eventually(func() string { return f.ip(name).Status.Node }, 3*time.Second, 20*time.Millisecond).Should(Equal(node))
	t.Logf("placed %s after the agent's first renewal", time.Since(start).Round(time.Millisecond))
	f.readyAttachedOn(name, node)
}
