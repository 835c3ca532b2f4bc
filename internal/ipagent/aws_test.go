package ipagent

import (
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/testenv"
)

const byoipPool = "ipv4pool-ec2-0123456789abcdef0"

// changeStatus is setStatus retried on conflicts with the agent's writes.
func (f *fixture) changeStatus(name string, change func(*ipv1.IPStatus)) {
	f.T.Helper()
	f.G.Eventually(func() error {
		ip := &ipv1.IP{}
		if err := k8s.Get(f.Ctx, client.ObjectKey{Name: name}, ip); err != nil {
			return err
		}
		orig := ip.DeepCopy()
		change(&ip.Status)
		return k8s.Status().Patch(f.Ctx, ip, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	}, testenv.WaitFor).Should(Succeed())
}

// An IP of an aws pool in private mode is programmed like any other, but
// never announced: EC2 routes it, and ARP changes nothing in a VPC.
func TestAWSPrivateAddressIsNotAnnounced(t *testing.T) {
	f := newFixture(t)
	pod := f.pod("app", thisNode, "10.244.1.61")
	ip := f.ip("ip", "10.0.9.61", ipv1.IPStatus{Node: thisNode, Pod: pod, AWS: &ipv1.AWSStatus{}})
	want := assignment("10.0.9.61", "10.244.1.61")
	want.NoAnnounce = true
	f.G.Eventually(dp.lastApplied, testenv.WaitFor).Should(ContainElement(want))
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(pod))
}

// An Elastic IP reaches the node at the private IP EC2 associates it
// with. The agent claims the IP at once (the controller moves it in EC2
// only after the claim), programs nothing until the controller records
// that EC2 routes it here, then programs the private IP, unannounced; it
// releases the claim only once nothing is left.
func TestAWSElasticIPProgramsItsPrivateIP(t *testing.T) {
	f := newFixture(t)
	const eip, priv = "198.51.100.61", "10.0.9.62"
	pod := f.pod("app", thisNode, "10.244.1.62")
	ip := f.ip("ip", eip, ipv1.IPStatus{Node: thisNode, Pod: pod, AWS: &ipv1.AWSStatus{PublicIPv4Pool: byoipPool}})

	f.G.Eventually(f.attachedNode(ip), testenv.WaitFor).Should(Equal(thisNode))
	f.G.Consistently(func(g Gomega) {
		g.Expect(f.attachedNode(ip)()).To(Equal(thisNode), "the claim is kept while EC2 is pending")
		g.Expect(f.attachedPod(ip)()).To(BeEmpty())
		g.Expect(dp.everApplied(netip.MustParseAddr(eip))).To(BeFalse(), "the Elastic IP itself never reaches the node")
	}, quiet, 50*time.Millisecond).Should(Succeed())

	// EC2 routes the Elastic IP to another node's private IP (a stale
	// record): still nothing.
	f.changeStatus(ip, func(s *ipv1.IPStatus) {
		s.AWS.Node, s.AWS.PrivateIP = otherNode, priv
	})
	f.G.Consistently(func() bool { return dp.everApplied(netip.MustParseAddr(priv)) }, quiet, 50*time.Millisecond).Should(BeFalse())

	f.changeStatus(ip, func(s *ipv1.IPStatus) { s.AWS.Node = thisNode })
	want := assignment(priv, "10.244.1.62")
	want.NoAnnounce = true
	f.G.Eventually(dp.lastApplied, testenv.WaitFor).Should(ContainElement(want))
	f.G.Eventually(f.attachedPod(ip), testenv.WaitFor).Should(Equal(pod))

	// Moved away: released once the private IP is gone from the kernel.
	f.changeStatus(ip, func(s *ipv1.IPStatus) { s.Node = "" })
	f.G.Eventually(f.attachedNode(ip), testenv.WaitFor).Should(BeEmpty())
	f.G.Expect(dp.present(netip.MustParseAddr(priv))).To(BeFalse())
}
