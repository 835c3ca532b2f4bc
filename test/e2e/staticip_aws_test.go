package e2e

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/lab/labnet"
	"github.com/kubext/kubext/test/staticip"
)

// awsPool is the aws pool's range: secondary private IPs of the lab
// subnet, routed by the VPC model.
const awsPool = "203.0.113.160/29"

// The lab VPC's BYOIP pool of Elastic IPs: off the client's link, in the
// part of the pod subnet no node's podCIDR uses; the client's 1:1 NAT
// translates them before they are routed.
const (
	awsPublicPool  = "ipv4pool-ec2-0123456789abcdef0"
	awsPublicRange = "198.51.100.248/29"
)

var (
	vpcOnce sync.Once
	vpc     *lab.VPC
	vpcErr  error
)

// awsStack is the static IP stack with the manager replaced, for the rest
// of the test, by one running the aws provider against the lab's VPC
// model (started once: it gives the nodes their providerIDs).
func awsStack(t *testing.T) (*staticIPStack, *lab.VPC) {
	t.Helper()
	s := staticIP(t)
	vpcOnce.Do(func() {
		// It lives as long as the lab: the nodes keep their providerIDs.
		vpc, vpcErr = theLab.StartVPC(context.Background(), lab.VPCOptions{Addresses: netip.MustParsePrefix(awsPool),
			PublicPool: awsPublicPool, PublicRange: netip.MustParsePrefix(awsPublicRange)})
	})
	if vpcErr != nil {
		t.Fatal(vpcErr)
	}
	// The manager's credentials, as the SDK's default chain reads them
	// from the environment; the lab's EC2 does not check signatures.
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDLAB")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "lab")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	s.replaceManager(t, awsManagerArgs(vpc))
	return s, vpc
}

// Private mode on the lab's VPC: the partner reaches the holder at the
// fixed address, which EC2 assigned to the holder node's ENI; the holder's
// egress leaves from it; when the holder's node dies the standby's ENI
// gets the address and the standby answers; the dead node, back, never
// does; deleting the IP takes the address off EC2.
func TestStaticIPAWSPrivateFailover(t *testing.T) {
	s, vpc := awsStack(t)
	g := NewWithT(t)
	ctx := context.Background()
	addr := netip.MustParseAddr("203.0.113.162")
	staticip.WatchSplits(t, theLab.Net, addr)

	pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "e2e-aws-private"},
		Spec: ipv1.IPPoolSpec{Addresses: []string{awsPool}, Provider: ipv1.ProviderAWS, Claimants: defaultClaimants()}}
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "partner-aws"}, Spec: ipv1.IPSpec{Address: addr.String(), Pool: pool.Name}}
	s.createAWSIP(t, g, pool, ip, "partner-aws-app")

	var holder, standby, holderNode string
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, "partner-aws")
		g.Expect(staticip.Ready(ip)).To(BeTrue(), "IP not Ready: %v", ip.Status.Conditions)
		g.Expect(ip.Status.Standbys).To(HaveLen(1))
		g.Expect(ip.Status.AWS).NotTo(BeNil())
		holder, standby, holderNode = staticip.PodName(ip.Status.Pod), staticip.PodName(ip.Status.Standbys[0]), ip.Status.Node
		g.Expect(ip.Status.AWS.NetworkInterfaceID).To(Equal(vpc.ENIs[holderNode]))
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	g.Expect(vpc.NodeOfENI(vpc.HolderENI(addr))).To(Equal(holderNode), "EC2 assigned the address to the holder's ENI")

	g.Eventually(func() (string, error) { return staticip.AskFrom(theLab.Net.ClientNamespace(), addr, time.Second) }, 20*time.Second, 100*time.Millisecond).Should(Equal(holder))
	g.Expect(answersOn(addr)).To(Equal([]string{holderNode}))
	g.Expect(staticip.SourceSeenByClient(theLab, s.pods, "default/"+holder)).To(Equal(addr.String()))

	standbyNode := s.killHolder(t, g, ip.Name, holderNode, addr, standby)
	g.Expect(vpc.NodeOfENI(vpc.HolderENI(addr))).To(Equal(standbyNode))

	s.revive(g, holderNode)
	g.Consistently(func(g Gomega) {
		g.Expect(vpc.NodeOfENI(vpc.HolderENI(addr))).To(Equal(standbyNode))
		g.Expect(answersOn(addr)).NotTo(ContainElement(holderNode))
		g.Expect(staticip.AskFrom(theLab.Net.ClientNamespace(), addr, time.Second)).To(Equal(standby))
	}, 3*time.Second, 250*time.Millisecond).Should(Succeed())
	g.Expect(vpc.Err()).NotTo(HaveOccurred())

	g.Expect(s.c.Delete(ctx, ip)).To(Succeed())
	g.Eventually(func() string { return vpc.HolderENI(addr) }, 30*time.Second, 100*time.Millisecond).Should(BeEmpty())
}

// Public mode on the lab's VPC: the Elastic IP is allocated from the BYOIP
// pool and associated with a secondary private IP of the holder's ENI;
// the partner reaches the holder at the Elastic IP and sees its egress
// from it; on failover the association follows the standby; deleting the
// IP releases the Elastic IP kubext allocated.
func TestStaticIPAWSPublicFailover(t *testing.T) {
	s, vpc := awsStack(t)
	g := NewWithT(t)
	ctx := context.Background()
	eip := netip.MustParseAddr("198.51.100.250")

	pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "e2e-aws-public"},
		Spec: ipv1.IPPoolSpec{Addresses: []string{awsPublicRange}, Provider: ipv1.ProviderAWS, Claimants: defaultClaimants(),
			AWS: &ipv1.AWSProvider{PublicIPv4Pool: awsPublicPool}}}
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "partner-eip"}, Spec: ipv1.IPSpec{Address: eip.String(), Pool: pool.Name}}
	s.createAWSIP(t, g, pool, ip, "partner-eip-app")

	var holder, standby, holderNode string
	var priv netip.Addr
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, "partner-eip")
		g.Expect(staticip.Ready(ip)).To(BeTrue(), "IP not Ready: %v", ip.Status.Conditions)
		g.Expect(ip.Status.Standbys).To(HaveLen(1))
		holder, standby, holderNode = staticip.PodName(ip.Status.Pod), staticip.PodName(ip.Status.Standbys[0]), ip.Status.Node
		g.Expect(ip.Status.AWS.AllocationID).NotTo(BeEmpty())
		g.Expect(ip.Status.AWS.AssociationID).NotTo(BeEmpty())
		priv = netip.MustParseAddr(ip.Status.AWS.PrivateIP)
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	staticip.WatchSplits(t, theLab.Net, priv)
	_, eni, assocPriv, ok := vpc.EC2.EIP(eip.String())
	g.Expect(ok).To(BeTrue())
	g.Expect(assocPriv).To(Equal(priv.String()))
	g.Expect(vpc.NodeOfENI(eni)).To(Equal(holderNode))
	g.Expect(answersOn(priv)).To(Equal([]string{holderNode}))
	g.Expect(answersOn(eip)).To(BeEmpty(), "the Elastic IP itself never reaches a node")

	if _, err := staticip.AskUntil(theLab.Net.ClientNamespace(), eip, holder, 20*time.Second); err != nil {
		dumpClient(t)
		t.Fatal(err)
	}
	g.Expect(staticip.SourceSeenByClient(theLab, s.pods, "default/"+holder)).To(Equal(eip.String()))

	standbyNode := s.killHolder(t, g, ip.Name, holderNode, eip, standby)
	_, eni, standbyPriv, _ := vpc.EC2.EIP(eip.String())
	g.Expect(vpc.NodeOfENI(eni)).To(Equal(standbyNode))
	g.Expect(staticip.SourceSeenByClient(theLab, s.pods, "default/"+standby)).To(Equal(eip.String()))

	s.revive(g, holderNode)
	g.Expect(vpc.Err()).NotTo(HaveOccurred())

	g.Expect(s.c.Delete(ctx, ip)).To(Succeed())
	g.Eventually(func() bool { _, _, _, ok := vpc.EC2.EIP(eip.String()); return ok }, 30*time.Second, 100*time.Millisecond).Should(BeFalse(),
		"the Elastic IP kubext allocated is released")
	// The private IPs it used are the lab's again: the client reaches them
	// through ARP, not through an entry that points at nobody (the
	// provider picks them at random in the subnet, which the l2 tests'
	// addresses share).
	for _, a := range []netip.Addr{priv, netip.MustParseAddr(standbyPriv)} {
		g.Eventually(func() []string { return clientPermanentNeighbours(a) }, 5*time.Second, 50*time.Millisecond).
			Should(BeEmpty(), "the client still routes %s by a former association", a)
	}
}

// clientPermanentNeighbours lists the client namespace's permanent
// neighbour entries for addr (its MAC addresses).
func clientPermanentNeighbours(addr netip.Addr) []string {
	var out []string
	_ = labnet.Do(theLab.Net.ClientNamespace(), func() error {
		neighs, err := netlink.NeighList(0, netlink.FAMILY_V4)
		for _, n := range neighs {
			if n.IP.Equal(addr.AsSlice()) && n.State&netlink.NUD_PERMANENT != 0 {
				out = append(out, n.HardwareAddr.String())
			}
		}
		return err
	})
	return out
}

// createAWSIP creates pool, ip and a Deployment named deployment of two
// pods claiming ip. When the test ends they go again, the pool only once
// the IP is gone (EC2 no longer has its address), before the aws manager
// is replaced.
func (s *staticIPStack) createAWSIP(t *testing.T, g Gomega, pool *ipv1.IPPool, ip *ipv1.IP, deployment string) {
	t.Helper()
	ctx := context.Background()
	dep := staticip.Deployment(deployment, ip.Name, 2)
	for _, o := range []client.Object{pool, ip, dep} {
		g.Expect(s.c.Create(ctx, o)).To(Succeed())
	}
	// Before the aws manager is replaced.
	t.Cleanup(func() { s.deleteAWS(dep, ip, pool) })
}

// killHolder kills the holder's node, waits until the standby pod answers
// the client at addr and the IP is Ready on the standby, and returns the
// standby's node.
func (s *staticIPStack) killHolder(t *testing.T, g Gomega, ipName, holderNode string, addr netip.Addr, standby string) string {
	t.Helper()
	g.Expect(theLab.KillNode(context.Background(), holderNode)).To(Succeed())
	start := time.Now()
	g.Eventually(func() (string, error) {
		return staticip.AskFrom(theLab.Net.ClientNamespace(), addr, 100*time.Millisecond)
	}, 30*time.Second, 50*time.Millisecond).Should(Equal(standby))
	t.Logf("the standby answered at %s %s after the holder's node was killed", addr, time.Since(start).Round(10*time.Millisecond))
	var standbyNode string
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, ipName)
		g.Expect(staticip.PodName(ip.Status.Pod)).To(Equal(standby))
		g.Expect(staticip.Ready(ip)).To(BeTrue())
		standbyNode = ip.Status.Node
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	return standbyNode
}

// revive brings a killed node back with its ip-agent.
func (s *staticIPStack) revive(g Gomega, node string) {
	ctx := context.Background()
	g.Expect(theLab.ReviveNode(ctx, node)).To(Succeed())
	agent, err := theLab.StartIPAgent(ctx, node, witnessArgs...)
	g.Expect(err).NotTo(HaveOccurred())
	s.agents[node] = agent
}

// dumpClient logs the client namespace's neighbours, routes and nftables
// rules, to debug the VPC model.
func dumpClient(t *testing.T) {
	_ = labnet.Do(theLab.Net.ClientNamespace(), func() error {
		neighs, err := netlink.NeighList(0, netlink.FAMILY_V4)
		for _, n := range neighs {
			t.Logf("client neigh %s %s state %#x", n.IP, n.HardwareAddr, n.State)
		}
		routes, _ := netlink.RouteList(nil, netlink.FAMILY_V4)
		for _, r := range routes {
			t.Logf("client route %s", r)
		}
		c, _ := nftables.New()
		chains, cerr := c.ListChains()
		for _, ch := range chains {
			rules, _ := c.GetRules(ch.Table, ch)
			t.Logf("client nft chain %s/%s: %d rules", ch.Table.Name, ch.Name, len(rules))
		}
		t.Logf("errors: %v %v", err, cerr)
		return nil
	})
	for _, n := range theLab.Nodes {
		t.Logf("%s has %v", n, answersOnAll(n))
	}
}

func answersOnAll(node string) []string {
	var out []string
	_ = labnet.Do(theLab.Net.NodeNamespace(node), func() error {
		addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
		for _, a := range addrs {
			out = append(out, a.IPNet.String())
		}
		return err
	})
	return out
}
