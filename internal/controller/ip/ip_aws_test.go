package ip

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	awsprov "github.com/kubext/kubext/internal/provider/aws"
	"github.com/kubext/kubext/internal/provider/aws/ec2double"
	"github.com/kubext/kubext/test/testenv"
)

// awsNode creates a node backed by an EC2 instance of ec2d (one ENI in
// the nodes' subnet) and returns its name and ENI.
func (f *fixture) awsNode(name string) (string, string) {
	f.T.Helper()
	inst, enis := ec2d.AddInstance(awsSubnet)
	f.Create(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/" + inst}})
	return name, enis[0]
}

// awsPool creates an aws pool: private (addresses of the nodes' subnet)
// or public (the BYOIP pool).
func (f *fixture) awsPool(name, cidr string, public bool) {
	spec := ipv1.IPPoolSpec{Addresses: []string{cidr}, Provider: ipv1.ProviderAWS,
		Claimants: &ipv1.PoolClaimants{Namespaces: []string{"default"}}}
	if public {
		spec.AWS = &ipv1.AWSProvider{PublicIPv4Pool: awsPublicPool}
	}
	f.Create(&ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec})
}

// readyOn waits until the IP is Ready on node with EC2 routing its
// address to eni, and returns it.
func (f *fixture) readyOn(name, node, eni string) *ipv1.IP {
	f.T.Helper()
	var ip *ipv1.IP
	f.G.Eventually(func(g Gomega) {
		ip = f.ip(name)
		g.Expect(ip.Status.AttachedNode).To(Equal(node))
		g.Expect(condition(ip, ipv1.ConditionReady).Status).To(Equal(metav1.ConditionTrue), "%+v", ip.Status.Conditions)
		g.Expect(ip.Status.AWS).NotTo(BeNil())
		g.Expect(ip.Status.AWS.Node).To(Equal(node))
		g.Expect(ip.Status.AWS.NetworkInterfaceID).To(Equal(eni))
	}, testenv.WaitFor).Should(Succeed())
	return ip
}

// Private mode: the holder's ENI gets the address; on failover the
// standby's ENI takes it with one mutating EC2 call; the lost node, back,
// never gets it again; delete takes it off EC2.
func TestAWSPrivateMoveFailoverAndDelete(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.awsPool(pool, "10.0.200.0/29", false)
	n1, eni1 := f.awsNode(f.name("a"))
	n2, eni2 := f.awsNode(f.name("b"))
	a1 := startAgent(t, n1)
	startAgent(t, n2)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	f.pod(f.name("first"), name, n1, "192.0.2.111")
	ip := f.readyOn(name, n1, eni1)
	addr := ip.Status.Address
	f.G.Expect(ec2d.Holders(addr)).To(Equal([]string{eni1}))
	f.G.Expect(ip.Status.AWS.PrivateIP).To(Equal(addr))
	f.G.Expect(ip.Status.AWS.VPCID).To(Equal("vpc-1"))
	f.G.Expect(ip.Status.AWS.AllocationID).To(BeEmpty())
	f.eventOn(name, "EC2Attached")

	time.Sleep(50 * time.Millisecond) // the second pod is younger: a standby
	f.pod(f.name("second"), name, n2, "192.0.2.112")
	f.G.Eventually(func() []string { return f.ip(name).Status.Standbys }, testenv.WaitFor).Should(HaveLen(1))
	// The standby's node is resolved ahead of the failover.
	time.Sleep(300 * time.Millisecond)
	before := ec2d.Mutating()
	a1.stop()
	f.readyOn(name, n2, eni2)
	f.G.Expect(ec2d.Holders(addr)).To(Equal([]string{eni2}))
	f.G.Expect(ec2d.Mutating()-before).To(Equal(1), "one AssignPrivateIpAddresses with AllowReassignment per move")

	// The lost node comes back: its agent is not asked to hold the IP,
	// and EC2 keeps routing the address to the standby.
	startAgent(t, n1)
	f.G.Consistently(func(g Gomega) {
		g.Expect(ec2d.Holders(addr)).To(Equal([]string{eni2}))
		g.Expect(f.ip(name).Status.AttachedNode).To(Equal(n2))
	}, 2*time.Second, 100*time.Millisecond).Should(Succeed())

	f.G.Expect(k8s.Delete(f.Ctx, f.ip(name))).To(Succeed())
	f.G.Eventually(func() error { return k8s.Get(f.Ctx, client.ObjectKey{Name: name}, &ipv1.IP{}) }, testenv.WaitFor).ShouldNot(Succeed())
	f.G.Expect(ec2d.Holders(addr)).To(BeEmpty(), "deleted IP still on an ENI")
	f.G.Expect(ec2d.PrivateIPs(eni1)).To(HaveLen(1), "only the primary IP is left")
	f.G.Eventually(func() error { return k8s.Get(f.Ctx, client.ObjectKey{Name: addr}, &networkingv1.IPAddress{}) }, testenv.WaitFor).ShouldNot(Succeed())
}

// EC2 follows the placement, not the claim: once the old holder is lost
// and the standby's node is on record, EC2 moves the address while the
// standby's agent still has to claim it (its witness check and its write
// are off the failover's path). Until the holder is lost, EC2 does not
// move it, standby or not.
func TestAWSMovesInEC2BeforeTheClaim(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.awsPool(pool, "10.0.200.24/29", false)
	n1, eni1 := f.awsNode(f.name("a"))
	n2, eni2 := f.awsNode(f.name("b"))
	a1 := startAgent(t, n1)
	a2 := startAgent(t, n2)
	a2.noClaim.Store(true)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	f.pod(f.name("first"), name, n1, "192.0.2.121")
	addr := f.readyOn(name, n1, eni1).Status.Address
	time.Sleep(50 * time.Millisecond) // the second pod is younger: a standby
	f.pod(f.name("second"), name, n2, "192.0.2.122")
	f.G.Eventually(func() []string { return f.ip(name).Status.Standbys }, testenv.WaitFor).Should(HaveLen(1))
	f.G.Consistently(func() []string { return ec2d.Holders(addr) }, time.Second, 50*time.Millisecond).
		Should(Equal([]string{eni1}), "moved away from a live holder")

	before := ec2d.Mutating()
	a1.stop()
	f.G.Eventually(func(g Gomega) {
		g.Expect(ec2d.Holders(addr)).To(Equal([]string{eni2}))
		ip := f.ip(name)
		g.Expect(ip.Status.Node).To(Equal(n2))
		g.Expect(ip.Status.AWS.Node).To(Equal(n2), "the move is on record")
	}, testenv.WaitFor).Should(Succeed())
	ip := f.ip(name)
	f.G.Expect(ip.Status.AttachedNode).To(BeEmpty(), "moved in EC2 before the claim")
	f.G.Expect(condition(ip, ipv1.ConditionReady).Status).To(Equal(metav1.ConditionFalse), "Ready only once the agent confirms")

	a2.noClaim.Store(false)
	f.readyOn(name, n2, eni2)
	f.G.Expect(ec2d.Holders(addr)).To(Equal([]string{eni2}))
	f.G.Expect(ec2d.Mutating()-before).To(Equal(1), "the claim makes no second move")
}

// Public mode: an Elastic IP is allocated from the BYOIP pool, tagged,
// associated with a secondary private IP of the holder's ENI, and
// re-associated on a hand-over with at most two mutating calls; delete
// releases it.
func TestAWSPublicAssociateReassociateAndRelease(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.awsPool(pool, "198.51.100.128/29", true)
	n1, eni1 := f.awsNode(f.name("a"))
	n2, eni2 := f.awsNode(f.name("b"))
	startAgent(t, n1)
	startAgent(t, n2)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	first := f.pod(f.name("first"), name, n1, "192.0.2.121")
	ip := f.readyOn(name, n1, eni1)
	addr := ip.Status.Address
	alloc, eni, priv, ok := ec2d.EIP(addr)
	f.G.Expect(ok).To(BeTrue())
	f.G.Expect(eni).To(Equal(eni1))
	f.G.Expect(ip.Status.AWS.AllocationID).To(Equal(alloc))
	f.G.Expect(ip.Status.AWS.PrivateIP).To(Equal(priv))
	f.G.Expect(ip.Status.AWS.AssociationID).NotTo(BeEmpty())
	f.G.Expect(ip.Status.AWS.PublicIPv4Pool).To(Equal(awsPublicPool))

	time.Sleep(50 * time.Millisecond)
	f.pod(f.name("second"), name, n2, "192.0.2.122")
	f.G.Eventually(func() []string { return f.ip(name).Status.Standbys }, testenv.WaitFor).Should(HaveLen(1))
	time.Sleep(300 * time.Millisecond)
	before := ec2d.Mutating()
	f.setReady(first, false, "192.0.2.121")
	ip = f.readyOn(name, n2, eni2)
	alloc2, eni, priv2, _ := ec2d.EIP(addr)
	f.G.Expect(alloc2).To(Equal(alloc), "the allocation is reused")
	f.G.Expect(eni).To(Equal(eni2))
	f.G.Expect(ip.Status.AWS.PrivateIP).To(Equal(priv2))
	f.G.Expect(ec2d.Holders(priv2)).To(Equal([]string{eni2}))
	f.G.Expect(ec2d.Mutating() - before).To(BeNumerically("<=", 2))

	f.G.Expect(k8s.Delete(f.Ctx, f.ip(name))).To(Succeed())
	f.G.Eventually(func() error { return k8s.Get(f.Ctx, client.ObjectKey{Name: name}, &ipv1.IP{}) }, testenv.WaitFor).ShouldNot(Succeed())
	_, _, _, ok = ec2d.EIP(addr)
	f.G.Expect(ok).To(BeFalse(), "the Elastic IP kubext allocated is released")
	f.G.Expect(ec2d.Holders(priv2)).To(BeEmpty(), "the private IP kubext assigned is given back")
}

// Public mode: the secondary private IP kubext asks EC2 for is on record
// in status.aws.pending (in the API server, not only in the manager's
// memory) when the assign call starts, so that a manager killed before
// recording EC2's answer leaves nothing on the ENI that its successor
// cannot find; once the Elastic IP is associated, pending is cleared.
func TestAWSPublicPrivateIPOnRecordBeforeTheAssign(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.awsPool(pool, "198.51.100.152/29", true)
	n1, eni1 := f.awsNode(f.name("a"))
	startAgent(t, n1)
	var seen []*ipv1.AWSPrivateIP
	ec2d.OnCall("AssignPrivateIpAddresses", func() {
		ip := &ipv1.IP{}
		if err := k8s.Get(f.Ctx, client.ObjectKey{Name: name}, ip); err == nil && ip.Status.AWS != nil {
			seen = append(seen, ip.Status.AWS.Pending)
		}
	})
	defer ec2d.OnCall("AssignPrivateIpAddresses", nil)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	f.pod(f.name("app"), name, n1, "192.0.2.151")
	ip := f.readyOn(name, n1, eni1)
	ec2d.OnCall("AssignPrivateIpAddresses", nil)
	priv := ip.Status.AWS.PrivateIP
	f.G.Expect(seen).To(HaveLen(1), "one assign")
	f.G.Expect(seen[0]).To(Equal(&ipv1.AWSPrivateIP{NetworkInterfaceID: eni1, PrivateIP: priv}),
		"when EC2 was asked, the status already named the address it was asked for")
	f.G.Expect(ip.Status.AWS.Pending).To(BeNil(), "associated: no longer pending")
	f.G.Expect(ec2d.PrivateIPs(eni1)).To(ConsistOf(Not(Equal(priv)), priv), "the primary and the Elastic IP's private IP, nothing else")

	f.G.Expect(k8s.Delete(f.Ctx, f.ip(name))).To(Succeed())
	f.G.Eventually(func() error { return k8s.Get(f.Ctx, client.ObjectKey{Name: name}, &ipv1.IP{}) }, testenv.WaitFor).ShouldNot(Succeed())
	f.G.Expect(ec2d.Holders(priv)).To(BeEmpty())
}

// Public mode, a failover to a node in another subnet: two mutating calls
// before the Elastic IP is Ready on the standby (a new secondary private IP
// there, the re-association); the private IP left on the old node is
// recorded in status.aws.giveBack and given back just after.
func TestAWSPublicFailoverAcrossSubnetsGivesBackAfter(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.awsPool(pool, "198.51.100.144/29", true)
	n1, eni1 := f.awsNode(f.name("a"))
	inst, enis := ec2d.AddInstance(awsOtherSubnet)
	n2, eni2 := f.name("b"), enis[0]
	f.Create(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n2},
		Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1b/" + inst}})
	a1 := startAgent(t, n1)
	startAgent(t, n2)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	f.pod(f.name("first"), name, n1, "192.0.2.141")
	ip := f.readyOn(name, n1, eni1)
	addr, oldPriv := ip.Status.Address, ip.Status.AWS.PrivateIP

	time.Sleep(50 * time.Millisecond)
	f.pod(f.name("second"), name, n2, "192.0.2.142")
	f.G.Eventually(func() []string { return f.ip(name).Status.Standbys }, testenv.WaitFor).Should(HaveLen(1))
	time.Sleep(300 * time.Millisecond)
	// Count the mutating calls made until EC2 routes the Elastic IP to the
	// standby: the give-back comes after.
	ec2d.SetLatency(100 * time.Millisecond)
	defer ec2d.SetLatency(0)
	before := ec2d.Mutating()
	a1.stop()
	// When the status first says EC2 routes it to the standby (what its
	// agent waits for), the move's calls are made and the give-back has
	// not started: it is recorded, not done.
	var moved int
	f.G.Eventually(func(g Gomega) {
		moved = ec2d.Mutating() - before
		st := f.ip(name).Status.AWS
		g.Expect(st.Node).To(Equal(n2))
		g.Expect(st.GiveBack).To(ConsistOf(ipv1.AWSPrivateIP{NetworkInterfaceID: eni1, PrivateIP: oldPriv}))
	}, testenv.WaitFor, 5*time.Millisecond).Should(Succeed())
	f.G.Expect(moved).To(Equal(2), "a new private IP on the standby's ENI and the re-association, nothing else")
	f.readyOn(name, n2, eni2)
	f.G.Eventually(func() []string { return ec2d.Holders(oldPriv) }, testenv.WaitFor).Should(BeEmpty(), "the old private IP is given back")
	f.G.Eventually(func() []ipv1.AWSPrivateIP { return f.ip(name).Status.AWS.GiveBack }, testenv.WaitFor).Should(BeEmpty())
	f.G.Expect(ec2d.PrivateIPs(eni1)).To(HaveLen(1), "only the primary IP is left on the old node")
	_, eni, priv, _ := ec2d.EIP(addr)
	f.G.Expect(eni).To(Equal(eni2))
	f.G.Expect(ec2d.Holders(priv)).To(Equal([]string{eni2}))
	f.eventOn(name, "EC2Attached")

	f.G.Expect(k8s.Delete(f.Ctx, f.ip(name))).To(Succeed())
	f.G.Eventually(func() error { return k8s.Get(f.Ctx, client.ObjectKey{Name: name}, &ipv1.IP{}) }, testenv.WaitFor).ShouldNot(Succeed())
	f.G.Expect(ec2d.PrivateIPs(eni2)).To(HaveLen(1), "only the primary IP is left on the new node")
}

// An Elastic IP a user allocated by hand is associated and disassociated,
// never released; a restart of the manager reuses what status records
// without a mutating call.
func TestAWSUserElasticIPAndRestartReuse(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.awsPool(pool, "198.51.100.136/29", true)
	const addr = "198.51.100.138"
	userAlloc := ec2d.AddEIP(addr, awsPublicPool, nil)
	// The user releases it when done (so that -count=N starts afresh).
	t.Cleanup(func() {
		_, _ = ec2d.ReleaseAddress(context.Background(), &ec2.ReleaseAddressInput{AllocationId: &userAlloc})
	})
	n1, eni1 := f.awsNode(f.name("a"))
	startAgent(t, n1)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool, Address: addr}})
	f.pod(f.name("app"), name, n1, "192.0.2.131")
	ip := f.readyOn(name, n1, eni1)
	f.G.Expect(ip.Status.AWS.AllocationID).To(Equal(userAlloc))
	recorded := *ip.Status.AWS

	// A restart: the manager's memory of EC2 is gone; the next reconcile
	// verifies with describes only and keeps the status as it is.
	reconciler.aws.mu.Lock()
	reconciler.aws.verified, reconciler.aws.targets = map[string]verifiedPlacement{}, map[string]awsprov.NodeTarget{}
	reconciler.aws.mu.Unlock()
	before, describes := ec2d.Mutating(), ec2d.Calls("DescribeAddresses")
	touch(f, name)
	f.G.Eventually(func() int { return ec2d.Calls("DescribeAddresses") }, testenv.WaitFor).Should(BeNumerically(">", describes))
	f.G.Consistently(func(g Gomega) {
		ip := f.ip(name)
		g.Expect(*ip.Status.AWS).To(Equal(recorded))
		g.Expect(condition(ip, ipv1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	}, time.Second, 100*time.Millisecond).Should(Succeed())
	f.G.Expect(ec2d.Mutating()).To(Equal(before), "a restart makes no mutating EC2 call")

	f.G.Expect(k8s.Delete(f.Ctx, f.ip(name))).To(Succeed())
	f.G.Eventually(func() error { return k8s.Get(f.Ctx, client.ObjectKey{Name: name}, &ipv1.IP{}) }, testenv.WaitFor).ShouldNot(Succeed())
	alloc, eni, _, ok := ec2d.EIP(addr)
	f.G.Expect(ok).To(BeTrue(), "an Elastic IP a user allocated is never released")
	f.G.Expect(alloc).To(Equal(userAlloc))
	f.G.Expect(eni).To(BeEmpty(), "but it is disassociated")
}

// EC2's refusals become the Attached condition and a Warning Event naming
// the EC2 action and error code; the move is not asked again before
// ec2Retry, whatever events come meanwhile (the agent's claim, its
// confirmation); once EC2 accepts, the IP is Ready.
func TestAWSFailureBecomesCondition(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.awsPool(pool, "10.0.200.8/29", false)
	n1, eni1 := f.awsNode(f.name("a"))
	assigns := ec2d.Calls("AssignPrivateIpAddresses")
	denied := ec2double.APIError("UnauthorizedOperation", "You are not authorized to perform this operation.")
	ec2d.Fail("AssignPrivateIpAddresses", denied)
	startAgent(t, n1)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	f.pod(f.name("app"), name, n1, "192.0.2.141")
	refused := func(g Gomega) {
		ip := f.ip(name)
		c := condition(ip, ipv1.ConditionReady)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(awsprov.ReasonIAMPermissionMissing))
		g.Expect(c.Message).To(And(ContainSubstring("AssignPrivateIpAddresses"), ContainSubstring("UnauthorizedOperation")))
	}
	f.G.Eventually(refused, testenv.WaitFor).Should(Succeed())
	ev := f.eventOn(name, awsprov.ReasonIAMPermissionMissing)
	f.G.Expect(ev.Type).To(Equal(corev1.EventTypeWarning))
	f.G.Expect(ev.Action).To(Equal("AssignPrivateIpAddresses"))
	f.G.Expect(ev.Note).To(ContainSubstring("ec2:AssignPrivateIpAddresses"))
	// The agent claims and confirms meanwhile: EC2 is not asked again,
	// and once claimed the IP shows the refusal again.
	f.G.Consistently(func() int { return ec2d.Calls("AssignPrivateIpAddresses") - assigns },
		3*time.Second, 100*time.Millisecond).Should(Equal(1), "asked EC2 again before ec2Retry")
	f.G.Expect(f.ip(name).Status.AttachedNode).To(Equal(n1))
	f.G.Eventually(refused, testenv.WaitFor).Should(Succeed())

	// The permission granted: the retry after ec2Retry succeeds.
	f.readyOn(name, n1, eni1)
	f.G.Expect(ec2d.Calls("AssignPrivateIpAddresses")-assigns).To(Equal(2), "one refused, one accepted")
}

// A node that is not on EC2 cannot hold an address of an aws pool: the
// condition says why, and nothing is assigned.
func TestAWSNodeWithoutInstance(t *testing.T) {
	f := newFixture(t)
	pool, name := f.name("pool"), f.name("ip")
	f.awsPool(pool, "10.0.200.16/29", false)
	node := f.node(f.name("bare"))
	startAgent(t, node)
	f.Create(&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: pool}})
	f.pod(f.name("app"), name, node, "192.0.2.151")
	f.G.Eventually(func(g Gomega) {
		c := condition(f.ip(name), ipv1.ConditionAttached)
		g.Expect(c.Reason).To(Equal(awsprov.ReasonInstanceNotFound))
		g.Expect(c.Message).To(ContainSubstring("spec.providerID"))
	}, testenv.WaitFor).Should(Succeed())
	f.G.Expect(ec2d.Holders(f.ip(name).Status.Address)).To(BeEmpty())
	p := &ipv1.IPPool{}
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: pool}, p)).To(Succeed())
	f.G.Eventually(func() metav1.ConditionStatus {
		_ = k8s.Get(f.Ctx, client.ObjectKey{Name: pool}, p)
		return poolCondition(p, ipv1.ConditionReady).Status
	}, testenv.WaitFor).Should(Equal(metav1.ConditionTrue))
}

// Without the provider, an aws pool's IPs are attached to no node.
func TestAWSPoolWithoutProviderIsNotSupported(t *testing.T) {
	r := &Reconciler{}
	pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: ipv1.IPPoolSpec{Provider: ipv1.ProviderAWS}}
	reason, msg := r.unattachable(context.Background(), &ipv1.IP{Status: ipv1.IPStatus{Address: "10.0.0.9"}}, pool)
	if reason != ipv1.ReasonNotSupported || !strings.Contains(msg, "without it") {
		t.Fatalf("unattachable = %q, %q; want NotSupported", reason, msg)
	}
}

// touch makes the controller reconcile the IP (an annotation change).
func touch(f *fixture, name string) {
	f.T.Helper()
	ip := f.ip(name)
	orig := ip.DeepCopy()
	if ip.Annotations == nil {
		ip.Annotations = map[string]string{}
	}
	ip.Annotations["test/touch"] = time.Now().String()
	f.G.Expect(k8s.Patch(f.Ctx, ip, client.MergeFrom(orig))).To(Succeed())
}
