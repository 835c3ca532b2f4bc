package aws_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/kubext/kubext/internal/provider/aws"
	"github.com/kubext/kubext/internal/provider/aws/ec2double"
)

// These tests speak EC2's wire protocol (SigV4, the query protocol, EC2's
// XML and error codes) to moto_server through the real SDK. moto is
// lenient where EC2 is strict; each gap has a test that asserts moto's
// actual behaviour, so that it fails when moto changes, and the tests of
// the provider show its verification catching what the gap would hide.

// motoEC2 is a moto_server of its own, set up with a VPC, subnet
// 10.0.1.0/24 and two instances.
type motoEC2 struct {
	url    string
	raw    *ec2.Client
	vpc    string
	subnet string
	inst   [2]string
	eni    [2]string
}

func startMoto(t *testing.T) *motoEC2 {
	t.Helper()
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		t.Fatalf("moto_server is not installed; these wire-protocol tests need it: pip install 'moto[server]==5.2.1' (%v)", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	var out strings.Builder
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", fmt.Sprint(port))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("moto_server did not listen on %s within 30s: %s", addr, out.String())
		}
	}
	isolateAWSConfig(t)
	m := &motoEC2{url: "http://" + addr}
	m.raw, err = aws.NewEC2Client(context.Background(), m.options())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	vpc, err := m.raw.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: sdkaws.String("10.0.0.0/16")})
	if err != nil {
		t.Fatal(err)
	}
	m.vpc = sdkaws.ToString(vpc.Vpc.VpcId)
	sn, err := m.raw.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: vpc.Vpc.VpcId, CidrBlock: sdkaws.String("10.0.1.0/24"), AvailabilityZone: sdkaws.String("us-east-1a")})
	if err != nil {
		t.Fatal(err)
	}
	m.subnet = sdkaws.ToString(sn.Subnet.SubnetId)
	imgs, err := m.raw.DescribeImages(ctx, &ec2.DescribeImagesInput{})
	if err != nil || len(imgs.Images) == 0 {
		t.Fatalf("moto has no AMI to run instances with: %v", err)
	}
	for i := range m.inst {
		run, err := m.raw.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: imgs.Images[0].ImageId, MinCount: sdkaws.Int32(1), MaxCount: sdkaws.Int32(1),
			InstanceType: types.InstanceTypeM5Large, SubnetId: sn.Subnet.SubnetId, Placement: &types.Placement{AvailabilityZone: sdkaws.String("us-east-1a")}})
		if err != nil {
			t.Fatal(err)
		}
		m.inst[i] = sdkaws.ToString(run.Instances[0].InstanceId)
		m.eni[i] = sdkaws.ToString(run.Instances[0].NetworkInterfaces[0].NetworkInterfaceId)
	}
	return m
}

func (m *motoEC2) options() aws.Options {
	return aws.Options{Region: "us-east-1", Endpoint: m.url, MaxAttempts: 2, MaxBackoff: 10 * time.Millisecond,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")}
}

func (m *motoEC2) providerID(i int) string { return "aws:///us-east-1a/" + m.inst[i] }

// holders lists, from moto's full ENI listing, the ENIs that hold ip.
func (m *motoEC2) holders(t *testing.T, ip string) []string {
	t.Helper()
	out, err := m.raw.DescribeNetworkInterfaces(context.Background(), &ec2.DescribeNetworkInterfacesInput{})
	if err != nil {
		t.Fatal(err)
	}
	var hs []string
	for _, n := range out.NetworkInterfaces {
		for _, p := range n.PrivateIpAddresses {
			if sdkaws.ToString(p.PrivateIpAddress) == ip {
				hs = append(hs, sdkaws.ToString(n.NetworkInterfaceId))
			}
		}
	}
	slices.Sort(hs)
	return hs
}

func (m *motoEC2) assign(t *testing.T, eni, ip string, reassign bool) {
	t.Helper()
	if _, err := m.raw.AssignPrivateIpAddresses(context.Background(), &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: sdkaws.String(eni), PrivateIpAddresses: []string{ip}, AllowReassignment: sdkaws.Bool(reassign)}); err != nil {
		t.Fatalf("assign %s to %s: %v", ip, eni, err)
	}
}

// counting counts the mutating calls a provider makes through the real
// client.
type counting struct {
	*ec2.Client
	mu sync.Mutex
	n  map[string]int
}

func (c *counting) count(a string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[a]++
}

func (c *counting) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := 0
	for _, a := range ec2double.MutatingActions {
		s += c.n[a]
	}
	return s
}

func (c *counting) AssignPrivateIpAddresses(ctx context.Context, in *ec2.AssignPrivateIpAddressesInput, o ...func(*ec2.Options)) (*ec2.AssignPrivateIpAddressesOutput, error) { //nolint:revive // the SDK names it so
	c.count("AssignPrivateIpAddresses")
	return c.Client.AssignPrivateIpAddresses(ctx, in, o...)
}

func (c *counting) UnassignPrivateIpAddresses(ctx context.Context, in *ec2.UnassignPrivateIpAddressesInput, o ...func(*ec2.Options)) (*ec2.UnassignPrivateIpAddressesOutput, error) { //nolint:revive // the SDK names it so
	c.count("UnassignPrivateIpAddresses")
	return c.Client.UnassignPrivateIpAddresses(ctx, in, o...)
}

func (c *counting) AllocateAddress(ctx context.Context, in *ec2.AllocateAddressInput, o ...func(*ec2.Options)) (*ec2.AllocateAddressOutput, error) {
	c.count("AllocateAddress")
	return c.Client.AllocateAddress(ctx, in, o...)
}

func (c *counting) AssociateAddress(ctx context.Context, in *ec2.AssociateAddressInput, o ...func(*ec2.Options)) (*ec2.AssociateAddressOutput, error) {
	c.count("AssociateAddress")
	return c.Client.AssociateAddress(ctx, in, o...)
}

func (c *counting) DisassociateAddress(ctx context.Context, in *ec2.DisassociateAddressInput, o ...func(*ec2.Options)) (*ec2.DisassociateAddressOutput, error) {
	c.count("DisassociateAddress")
	return c.Client.DisassociateAddress(ctx, in, o...)
}

func (c *counting) ReleaseAddress(ctx context.Context, in *ec2.ReleaseAddressInput, o ...func(*ec2.Options)) (*ec2.ReleaseAddressOutput, error) {
	c.count("ReleaseAddress")
	return c.Client.ReleaseAddress(ctx, in, o...)
}

// TestMotoPrivateMode: resolve, attach, idempotent re-attach, move and
// release over the wire. moto keeps a reassigned address on the old ENI
// too (see TestMotoGapReassignmentKeepsBoth), so the move costs moto one
// more mutating call than EC2: the verification's explicit unassign.
func TestMotoPrivateMode(t *testing.T) {
	m := startMoto(t)
	ctx := context.Background()
	c := &counting{Client: m.raw, n: map[string]int{}}
	p := aws.NewWithEC2(c, aws.Options{})
	a := aws.Address{Name: "web", IP: netip.MustParseAddr("10.0.1.50")}

	t0, err := p.Resolve(ctx, m.providerID(0), a)
	if err != nil || t0.ENI != m.eni[0] || t0.VPCID != m.vpc || t0.SubnetCIDR.String() != "10.0.1.0/24" {
		t.Fatalf("Resolve = %+v, %v; want %s in %s, 10.0.1.0/24", t0, err, m.eni[0], m.vpc)
	}
	if _, err := p.Attach(ctx, a, t0, aws.Attachment{}, nil); err != nil || c.total() != 1 {
		t.Fatalf("attach: %v after %d mutating calls", err, c.total())
	}
	if got := m.holders(t, "10.0.1.50"); !slices.Equal(got, []string{m.eni[0]}) {
		t.Fatalf("holders %v", got)
	}
	if _, err := p.Attach(ctx, a, t0, aws.Attachment{}, nil); err != nil || c.total() != 1 {
		t.Fatalf("re-attach: %v, %d mutating calls in all, want still 1", err, c.total())
	}

	t1, err := p.Resolve(ctx, m.providerID(1), a)
	if err != nil {
		t.Fatal(err)
	}
	att, err := p.Attach(ctx, a, t1, aws.Attachment{}, nil)
	if err != nil {
		t.Fatalf("move: %v", err)
	}
	if got := m.holders(t, "10.0.1.50"); !slices.Equal(got, []string{m.eni[1]}) {
		t.Fatalf("after the move moto lists %s on %v; the provider must have removed the leftover", a.IP, got)
	}
	if c.n["AssignPrivateIpAddresses"] != 2 || c.n["UnassignPrivateIpAddresses"] != 1 {
		t.Fatalf("move under moto: %v; want 1 assign with reassignment + 1 unassign of moto's leftover", c.n)
	}
	obs, err := p.Observe(ctx, a, m.vpc)
	if err != nil || len(obs.Holders) != 1 || obs.Holders[0].ENI != m.eni[1] || obs.Holders[0].InstanceID != m.inst[1] {
		t.Fatalf("Observe = %+v, %v", obs, err)
	}
	if err := p.Release(ctx, a, m.vpc, att); err != nil {
		t.Fatal(err)
	}
	if got := m.holders(t, "10.0.1.50"); len(got) != 0 {
		t.Fatalf("after Release moto lists %s on %v", a.IP, got)
	}
}

// TestMotoErrors: EC2's error codes for unknown instances and ENIs arrive
// through the SDK and become the provider's reasons.
func TestMotoErrors(t *testing.T) {
	m := startMoto(t)
	ctx := context.Background()
	p, err := aws.New(ctx, m.options())
	if err != nil {
		t.Fatal(err)
	}
	a := aws.Address{Name: "web", IP: netip.MustParseAddr("10.0.1.51")}
	_, err = p.Resolve(ctx, "aws:///us-east-1a/i-0123456789abcdef0", a)
	var e *aws.Error
	if !errors.As(err, &e) || e.Reason != aws.ReasonInstanceNotFound || e.Code != "InvalidInstanceID.NotFound" || !strings.Contains(e.Message, "DescribeInstances") {
		t.Fatalf("unknown instance: %v (%+v)", err, e)
	}
	_, err = p.Attach(ctx, a, aws.NodeTarget{InstanceID: m.inst[0], VPCID: m.vpc, ENI: "eni-0123456789abcdef0", SubnetID: m.subnet}, aws.Attachment{}, nil)
	if !errors.As(err, &e) || e.Reason != aws.ReasonNetworkInterfaceNotFound || e.Code != "InvalidNetworkInterfaceID.NotFound" || !strings.Contains(e.Message, "AssignPrivateIpAddresses") {
		t.Fatalf("unknown ENI: %v", err)
	}
	if _, err = p.Resolve(ctx, m.providerID(0), aws.Address{Name: "x", IP: netip.MustParseAddr("10.0.9.9")}); aws.ReasonOf(err) != aws.ReasonAddressNotInNodeSubnets {
		t.Fatalf("address outside the subnet: %v", err)
	}
}

// TestMotoGapAssignWithoutReassignment: EC2 refuses to assign an address
// another ENI holds unless AllowReassignment is set; moto accepts it and
// leaves the address on both ENIs.
func TestMotoGapAssignWithoutReassignment(t *testing.T) {
	m := startMoto(t)
	m.assign(t, m.eni[0], "10.0.1.60", false)
	m.assign(t, m.eni[1], "10.0.1.60", false) // EC2: InvalidIPAddress.InUse
	if got, want := m.holders(t, "10.0.1.60"), sorted(m.eni[0], m.eni[1]); !slices.Equal(got, want) {
		t.Fatalf("moto changed: holders %v, was %v", got, want)
	}
}

// TestMotoGapReassignmentKeepsBoth: with AllowReassignment EC2 moves the
// address; moto keeps it on the old ENI too.
func TestMotoGapReassignmentKeepsBoth(t *testing.T) {
	m := startMoto(t)
	m.assign(t, m.eni[0], "10.0.1.61", false)
	m.assign(t, m.eni[1], "10.0.1.61", true)
	if got, want := m.holders(t, "10.0.1.61"), sorted(m.eni[0], m.eni[1]); !slices.Equal(got, want) {
		t.Fatalf("moto changed: holders %v, was %v", got, want)
	}
}

// TestMotoGapAddressFilterPrimaryOnly: EC2's addresses.private-ip-address
// filter matches every private IP of an ENI; moto's matches only the
// primary one. The provider therefore lists the VPC's ENIs and matches the
// address itself.
func TestMotoGapAddressFilterPrimaryOnly(t *testing.T) {
	m := startMoto(t)
	m.assign(t, m.eni[0], "10.0.1.62", false)
	out, err := m.raw.DescribeNetworkInterfaces(context.Background(), &ec2.DescribeNetworkInterfacesInput{
		Filters: []types.Filter{{Name: sdkaws.String("addresses.private-ip-address"), Values: []string{"10.0.1.62"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.NetworkInterfaces) != 0 {
		t.Fatalf("moto changed: the filter found %d ENIs for a secondary address, it used to find none", len(out.NetworkInterfaces))
	}
	if got := m.holders(t, "10.0.1.62"); !slices.Equal(got, []string{m.eni[0]}) {
		t.Fatalf("the unfiltered listing shows %v", got)
	}
}

// TestMotoGapAssociateIgnoresPrivateIP: EC2 associates an Elastic IP with
// the private IP asked for; moto with the ENI's primary IP. The provider's
// verification of the association catches it.
func TestMotoGapAssociateIgnoresPrivateIP(t *testing.T) {
	m := startMoto(t)
	ctx := context.Background()
	m.assign(t, m.eni[0], "10.0.1.63", false)
	alloc, err := m.raw.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: types.DomainTypeVpc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.raw.AssociateAddress(ctx, &ec2.AssociateAddressInput{AllocationId: alloc.AllocationId, NetworkInterfaceId: sdkaws.String(m.eni[0]),
		PrivateIpAddress: sdkaws.String("10.0.1.63"), AllowReassociation: sdkaws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	got, err := m.raw.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{AllocationIds: []string{sdkaws.ToString(alloc.AllocationId)}})
	if err != nil || len(got.Addresses) != 1 {
		t.Fatal(err)
	}
	primary := m.holdersPrimary(t, m.eni[0])
	if pip := sdkaws.ToString(got.Addresses[0].PrivateIpAddress); pip != primary {
		t.Fatalf("moto changed: association on private IP %q, it used to be the primary %s", pip, primary)
	}
}

func (m *motoEC2) holdersPrimary(t *testing.T, eni string) string {
	t.Helper()
	out, err := m.raw.DescribeNetworkInterfaces(context.Background(), &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{eni}})
	if err != nil || len(out.NetworkInterfaces) != 1 {
		t.Fatal(err)
	}
	return sdkaws.ToString(out.NetworkInterfaces[0].PrivateIpAddress)
}

// TestMotoGapPublicIpv4Pools: moto has no DescribePublicIpv4Pools and
// ignores PublicIpv4Pool on AllocateAddress (it hands out the requested
// address from no pool at all, even for a pool that does not exist).
func TestMotoGapPublicIpv4Pools(t *testing.T) {
	m := startMoto(t)
	ctx := context.Background()
	_, err := m.raw.DescribePublicIpv4Pools(ctx, &ec2.DescribePublicIpv4PoolsInput{})
	var re *awshttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != 500 {
		t.Fatalf("moto changed: DescribePublicIpv4Pools used to fail with HTTP 500 (not implemented), got %v", err)
	}
	t.Logf("DescribePublicIpv4Pools under moto: %v", err)
	out, err := m.raw.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: types.DomainTypeVpc, Address: sdkaws.String("192.0.2.77"),
		PublicIpv4Pool: sdkaws.String("ipv4pool-ec2-00000000000000000")})
	if err != nil {
		t.Fatalf("moto changed: AllocateAddress from a pool that does not exist failed: %v", err)
	}
	if sdkaws.ToString(out.PublicIp) != "192.0.2.77" || sdkaws.ToString(out.PublicIpv4Pool) != "" {
		t.Fatalf("moto changed: allocated %s from pool %q", sdkaws.ToString(out.PublicIp), sdkaws.ToString(out.PublicIpv4Pool))
	}
	t.Logf("AllocateAddress from a nonexistent pool under moto: %s, pool %q", sdkaws.ToString(out.PublicIp), sdkaws.ToString(out.PublicIpv4Pool))
}

// TestMotoPublicModeVerificationCatchesMoto: the provider allocates (tagged)
// and associates over the wire; because moto puts the association on the
// primary IP instead of the one asked for, the verification reports
// VerificationFailed instead of claiming success; Release still
// disassociates and releases the tagged allocation, and a user's untagged
// Elastic IP is never released.
func TestMotoPublicModeVerificationCatchesMoto(t *testing.T) {
	m := startMoto(t)
	ctx := context.Background()
	c := &counting{Client: m.raw, n: map[string]int{}}
	p := aws.NewWithEC2(c, aws.Options{})
	a := aws.Address{Name: "web", IP: netip.MustParseAddr("192.0.2.10"), PublicIPv4Pool: "ipv4pool-ec2-0123456789abcdef0"}
	t0, err := p.Resolve(ctx, m.providerID(0), a)
	if err != nil || t0.ENI != m.eni[0] {
		t.Fatalf("Resolve = %+v, %v", t0, err)
	}
	att, err := p.Attach(ctx, a, t0, aws.Attachment{}, nil)
	if aws.ReasonOf(err) != aws.ReasonVerificationFailed || !strings.Contains(err.Error(), att.PrivateIP) {
		t.Fatalf("attach under moto: %v; want VerificationFailed naming %q", err, att.PrivateIP)
	}
	if c.n["AllocateAddress"] != 1 || c.n["AssignPrivateIpAddresses"] != 1 || c.n["AssociateAddress"] != 1 || att.AllocationID == "" {
		t.Fatalf("calls %v, attachment %+v", c.n, att)
	}
	got, err := m.raw.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{Filters: []types.Filter{{Name: sdkaws.String("tag:" + aws.TagKey), Values: []string{"web"}}}})
	if err != nil || len(got.Addresses) != 1 || sdkaws.ToString(got.Addresses[0].AllocationId) != att.AllocationID {
		t.Fatalf("the allocation is not findable by its tag: %v, %v", got, err)
	}

	// A restarted provider finds the allocation and allocates nothing.
	p2 := aws.NewWithEC2(c, aws.Options{})
	if _, err := p2.Attach(ctx, a, t0, att, nil); c.n["AllocateAddress"] != 1 {
		t.Fatalf("restart allocated again (%v): %v", c.n, err)
	}

	if err := p.Release(ctx, a, m.vpc, att); err != nil {
		t.Fatal(err)
	}
	if left, err := m.raw.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{}); err != nil || len(left.Addresses) != 0 {
		t.Fatalf("after Release moto still has %v (%v)", left, err)
	}
	// Only att.ENI is asked: moto hands out secondary private IPs without
	// checking the subnet's primaries, so the same address can also be
	// another instance's primary IP, which is not kubext's to remove.
	if got := m.holders(t, att.PrivateIP); slices.Contains(got, att.ENI) {
		t.Fatalf("the private IP %s kubext assigned is still on %s (holders %v)", att.PrivateIP, att.ENI, got)
	}

	user, err := m.raw.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: types.DomainTypeVpc, Address: sdkaws.String("192.0.2.11")})
	if err != nil {
		t.Fatal(err)
	}
	ua := aws.Address{Name: "api", IP: netip.MustParseAddr("192.0.2.11"), PublicIPv4Pool: a.PublicIPv4Pool}
	uatt, _ := p.Attach(ctx, ua, t0, aws.Attachment{}, nil)
	if err := p.Release(ctx, ua, m.vpc, uatt); err != nil {
		t.Fatal(err)
	}
	if left, err := m.raw.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{}); err != nil || len(left.Addresses) != 1 || sdkaws.ToString(left.Addresses[0].AllocationId) != sdkaws.ToString(user.AllocationId) {
		t.Fatalf("the user's Elastic IP was released: %v (%v)", left, err)
	}
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

// TestMotoGiveBack: the give-back after a move across subnets, over the
// wire: a secondary private IP no Elastic IP is associated with is
// unassigned from its ENI, one the Elastic IP is associated with is kept.
func TestMotoGiveBack(t *testing.T) {
	m := startMoto(t)
	ctx := context.Background()
	c := &counting{Client: m.raw, n: map[string]int{}}
	p := aws.NewWithEC2(c, aws.Options{})
	a := aws.Address{Name: "web", IP: netip.MustParseAddr("192.0.2.12"), PublicIPv4Pool: "ipv4pool-ec2-0123456789abcdef0"}
	out, err := m.raw.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: sdkaws.String(m.eni[0]), SecondaryPrivateIpAddressCount: sdkaws.Int32(1)})
	if err != nil || len(out.AssignedPrivateIpAddresses) == 0 {
		t.Fatalf("assign: %v, %v", out, err)
	}
	// The new address is the last listed (as the provider takes it).
	left := sdkaws.ToString(out.AssignedPrivateIpAddresses[len(out.AssignedPrivateIpAddresses)-1].PrivateIpAddress)
	eip, err := m.raw.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: types.DomainTypeVpc, Address: sdkaws.String(a.IP.String())})
	if err != nil {
		t.Fatal(err)
	}
	// Associated with eni[1]'s primary IP (what moto does whatever is asked).
	if _, err := m.raw.AssociateAddress(ctx, &ec2.AssociateAddressInput{AllocationId: eip.AllocationId, NetworkInterfaceId: sdkaws.String(m.eni[1])}); err != nil {
		t.Fatal(err)
	}
	d, err := m.raw.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{AllocationIds: []string{sdkaws.ToString(eip.AllocationId)}})
	if err != nil || len(d.Addresses) != 1 {
		t.Fatalf("describe: %v, %v", d, err)
	}
	associated := sdkaws.ToString(d.Addresses[0].PrivateIpAddress)
	rest, err := p.GiveBack(ctx, a, m.vpc, []aws.PrivateIP{{ENI: m.eni[0], IP: left}, {ENI: m.eni[1], IP: associated}})
	if err != nil || len(rest) != 0 {
		t.Fatalf("GiveBack: %v left, %v", rest, err)
	}
	if got := m.holders(t, left); slices.Contains(got, m.eni[0]) {
		t.Fatalf("%s is still on %s after the give-back (holders %v)", left, m.eni[0], got)
	}
	if c.n["UnassignPrivateIpAddresses"] != 1 {
		t.Fatalf("calls %v: want one unassign, the associated address kept", c.n)
	}
	if got := m.holders(t, associated); !slices.Contains(got, m.eni[1]) {
		t.Fatalf("the associated address %s was taken off %s (holders %v)", associated, m.eni[1], got)
	}
}
