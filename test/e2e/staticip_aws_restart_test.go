package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/staticip"
)

// awsCallLatency is what every call to the lab's EC2 takes while the
// restart test runs, as on EC2 (hundreds of ms per call): long enough for
// the crash to land before, during and after a mutating call.
const awsCallLatency = 300 * time.Millisecond

// Killing the manager and the old holder's agent in the middle of an aws
// move, at points before, inside and after the mutating EC2 call, loses
// nothing: the move completes after the restart, EC2 holds the address
// on the new holder's ENI only, one Elastic IP and one secondary private
// IP exist for it (public mode), and one reservation in the cluster.
func TestStaticIPAWSSurvivesRestartsMidMove(t *testing.T) {
	for _, mode := range []struct {
		name, addr string
		public     bool
	}{
		{name: "private", addr: "203.0.113.165"},
		{name: "public", addr: "198.51.100.252", public: true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			s, vpc := awsStack(t)
			// The managers started here, before awsStack puts the
			// default one back.
			t.Cleanup(func() { s.manager.Kill() })
			g := NewWithT(t)
			ctx := context.Background()
			addr := netip.MustParseAddr(mode.addr)
			if !mode.public {
				// Never two nodes answering, throughout (in public mode
				// the private IP behind the Elastic IP may change).
				staticip.WatchSplits(t, theLab.Net, addr)
			}
			pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "e2e-aws-restarts-" + mode.name},
				Spec: ipv1.IPPoolSpec{Addresses: []string{awsPool}, Provider: ipv1.ProviderAWS, Claimants: defaultClaimants()}}
			if mode.public {
				pool.Spec.Addresses = []string{awsPublicRange}
				pool.Spec.AWS = &ipv1.AWSProvider{PublicIPv4Pool: awsPublicPool}
			}
			name := "aws-restarts-" + mode.name
			ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Address: addr.String(), Pool: pool.Name}}
			s.createAWSIP(t, g, pool, ip, name+"-app")
			t.Cleanup(func() { vpc.EC2.SetLatency(0) })
			settled := func(g Gomega) *ipv1.IP {
				ip := s.ip(g, name)
				g.Expect(staticip.Ready(ip)).To(BeTrue(), "IP not Ready: %v", ip.Status.Conditions)
				g.Expect(ip.Status.AttachedNode).To(Equal(ip.Status.Node))
				g.Expect(ip.Status.Standbys).To(HaveLen(1))
				g.Expect(awsLeftovers(vpc, addr, mode.public, ip)).To(BeEmpty())
				return ip
			}
			var cur *ipv1.IP
			g.Eventually(func(g Gomega) { cur = settled(g) }, time.Minute, 200*time.Millisecond).Should(Succeed())

			vpc.EC2.SetLatency(awsCallLatency)
			// Where the crash lands, counted from the start of the first
			// mutating call of the move: before it ends, just after it
			// ends, and after the call that verifies it.
			for round, after := range []time.Duration{awsCallLatency / 2, awsCallLatency + 50*time.Millisecond, 2*awsCallLatency + 100*time.Millisecond} {
				from, to := cur.Status.Node, cur.Status.Standbys[0]
				t.Logf("round %d: moving from %s on %s to %s; crash %s after the first mutating EC2 call starts", round, cur.Status.Pod, from, to, after)
				mutating := vpc.EC2.Mutating()
				patch := client.RawPatch("application/merge-patch+json",
					[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, ipv1.AnnotationMoveTo, to)))
				g.Expect(s.c.Patch(ctx, cur, patch)).To(Succeed())
				g.Eventually(vpc.EC2.Mutating, 30*time.Second, 5*time.Millisecond).Should(BeNumerically(">", mutating), "the move reaches EC2")
				time.Sleep(after)
				s.manager.Kill()
				s.agents[from].Kill()
				forgetLeader(t)
				var err error
				s.manager, err = theLab.StartManager(ctx, "manager-aws-"+mode.name, awsManagerArgs(vpc)...)
				g.Expect(err).NotTo(HaveOccurred())
				s.agents[from], err = theLab.StartIPAgent(ctx, from, witnessArgs...)
				g.Expect(err).NotTo(HaveOccurred())

				g.Eventually(func(g Gomega) {
					cur = settled(g)
					g.Expect(cur.Status.Pod).To(Equal(to), "the requested move happened")
				}, time.Minute, 200*time.Millisecond).Should(Succeed(), "round %d", round)
				holder := cur.Status.Node
				if mode.public {
					_, eni, _, _ := vpc.EC2.EIP(addr.String())
					g.Expect(vpc.NodeOfENI(eni)).To(Equal(holder))
				} else {
					g.Expect(vpc.NodeOfENI(vpc.HolderENI(addr))).To(Equal(holder))
				}
			}
			vpc.EC2.SetLatency(0)
			g.Expect(vpc.Err()).NotTo(HaveOccurred())
			list := &networkingv1.IPAddressList{}
			g.Expect(s.c.List(ctx, list, client.MatchingLabels{ipv1.LabelPool: pool.Name})).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1), "one reservation, the IP's")
		})
	}
}

// awsManagerArgs are the aws manager's flags on the lab's VPC (see awsStack).
func awsManagerArgs(vpc *lab.VPC) []string {
	return append(slices.Clone(managerArgs), "--aws-provider", "--aws-region=lab-1", "--aws-endpoint="+vpc.Endpoint)
}

// awsLeftovers lists what EC2 holds for addr beyond what the IP's status
// records: in private mode the address on any ENI but the holder's; in
// public mode an Elastic IP not associated with the recorded private IP
// on the holder's ENI, or any other secondary private IP on the nodes'
// ENIs (kubext assigns exactly one per Elastic IP).
func awsLeftovers(vpc *lab.VPC, addr netip.Addr, public bool, ip *ipv1.IP) []string {
	var out []string
	holderENI := vpc.ENIs[ip.Status.Node]
	if !public {
		for _, eni := range vpc.EC2.Holders(addr.String()) {
			if eni != holderENI {
				out = append(out, fmt.Sprintf("%s also on %s (%s)", addr, eni, vpc.NodeOfENI(eni)))
			}
		}
		if len(vpc.EC2.Holders(addr.String())) == 0 {
			out = append(out, fmt.Sprintf("%s on no ENI", addr))
		}
		return out
	}
	_, eni, priv, ok := vpc.EC2.EIP(addr.String())
	switch {
	case !ok:
		return []string{fmt.Sprintf("no Elastic IP %s", addr)}
	case ip.Status.AWS == nil || eni != holderENI || priv != ip.Status.AWS.PrivateIP:
		out = append(out, fmt.Sprintf("Elastic IP %s associated with %s on %s, status says %+v", addr, priv, eni, ip.Status.AWS))
	}
	for node, e := range vpc.ENIs {
		ips := vpc.EC2.PrivateIPs(e)
		for _, p := range ips[1:] { // the first is the primary
			if e != holderENI || p != priv {
				out = append(out, fmt.Sprintf("secondary private IP %s left on %s (%s)", p, e, node))
			}
		}
	}
	return out
}

// deleteAWS deletes an aws scenario's objects; the IP goes only once EC2
// no longer has its address, so the pool (and the aws manager) must wait.
func (s *staticIPStack) deleteAWS(dep client.Object, ip *ipv1.IP, pool *ipv1.IPPool) {
	ctx := context.Background()
	_ = s.c.Delete(ctx, dep)
	_ = s.c.Delete(ctx, ip)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && s.c.Get(ctx, client.ObjectKeyFromObject(ip), &ipv1.IP{}) == nil {
		time.Sleep(100 * time.Millisecond)
	}
	_ = s.c.Delete(ctx, pool)
}
