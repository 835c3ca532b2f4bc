package ippool

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/testenv"
)

// A pool with Witness failover says when one of its IPs is held on its
// node's Lease because its witnesses did not vouch (the agents' fallback),
// naming it, and says so no longer once the hold is on the witnesses'
// word; a Lease pool has no such condition.
func TestWitnessPoolSaysWhichIPsFellBackToTheLease(t *testing.T) {
	f := newFixture(t)
	pool := f.pool(f.name("witness"), "192.0.2.176/29") // Witness by default
	lease := f.poolWithSpec(f.name("lease"), ipv1.IPPoolSpec{Addresses: []string{"192.0.2.184/29"}, Failover: ipv1.FailoverLease})
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: f.name("fell-back")}, Spec: ipv1.IPSpec{Pool: pool}}
	f.G.Expect(k8s.Create(f.Ctx, ip)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ip) })
	setStatus := func(s ipv1.IPStatus) {
		cur := &ipv1.IP{}
		f.G.Expect(k8s.Get(f.Ctx, client.ObjectKeyFromObject(ip), cur)).To(Succeed())
		cur.Status = s
		f.G.Expect(k8s.Status().Update(f.Ctx, cur)).To(Succeed())
	}
	condition := func(pool string) func() *metav1.Condition {
		return func() *metav1.Condition {
			return meta.FindStatusCondition(f.get(pool).Status.Conditions, ipv1.ConditionWitnesses)
		}
	}
	held := ipv1.IPStatus{Address: "192.0.2.178", Pool: pool, Assigned: true, Node: "n1", Pod: "default/a",
		AttachedNode: "n1", Witnesses: []string{"n2"}}
	setStatus(held)
	f.G.Eventually(condition(pool), testenv.WaitFor).Should(And(
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", ipv1.ReasonWitnessesUnreachable),
		HaveField("Message", ContainSubstring(ip.Name))))

	held.AttachedGeneration = 5
	setStatus(held)
	f.G.Eventually(condition(pool), testenv.WaitFor).Should(And(
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", ipv1.ReasonWitnessesHeard)))
	f.G.Expect(condition(lease)()).To(BeNil())
}
