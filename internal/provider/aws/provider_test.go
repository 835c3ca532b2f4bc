package aws_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/kubext/kubext/internal/provider/aws"
	"github.com/kubext/kubext/internal/provider/aws/ec2double"
)

var _ aws.EC2 = (*ec2double.Double)(nil)

const pool = "ipv4pool-ec2-0123456789abcdef0"

// world is a VPC with two subnets: nodes 1 and 2 in subnet A
// (10.0.1.0/24), node 3 in subnet B (10.0.2.0/24), and a BYOIP pool
// 192.0.2.0/24.
type world struct {
	d                *ec2double.Double
	p                *aws.Provider
	node             [3]string // providerIDs
	eni              [3]string
	subnetA, subnetB string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	d := ec2double.New()
	w := &world{d: d, p: aws.NewWithEC2(d, aws.Options{})}
	w.subnetA = d.AddSubnet("vpc-1", "10.0.1.0/24")
	w.subnetB = d.AddSubnet("vpc-1", "10.0.2.0/24")
	for i, s := range []string{w.subnetA, w.subnetA, w.subnetB} {
		id, enis := d.AddInstance(s)
		w.node[i], w.eni[i] = "aws:///us-east-1a/"+id, enis[0]
	}
	d.AddPool(pool, "192.0.2.0/24")
	return w
}

func private(ip string) aws.Address {
	return aws.Address{Name: "web", IP: netip.MustParseAddr(ip)}
}

func public(ip string) aws.Address {
	return aws.Address{Name: "web", IP: netip.MustParseAddr(ip), PublicIPv4Pool: pool}
}

// attach resolves node i and attaches a there, counting mutating calls.
func (w *world) attach(t *testing.T, i int, a aws.Address, prev aws.Attachment) (aws.Attachment, int, error) {
	t.Helper()
	ctx := context.Background()
	target, err := w.p.Resolve(ctx, w.node[i], a)
	if err != nil {
		t.Fatalf("Resolve(node %d, %s): %v", i, a.IP, err)
	}
	if target.ENI != w.eni[i] {
		t.Fatalf("Resolve(node %d) chose %s, want %s", i, target.ENI, w.eni[i])
	}
	before := w.d.Mutating()
	att, err := w.p.Attach(ctx, a, target, prev, nil)
	return att, w.d.Mutating() - before, err
}

func mustAttach(t *testing.T, w *world, i int, a aws.Address, prev aws.Attachment) (aws.Attachment, int) {
	t.Helper()
	att, n, err := w.attach(t, i, a, prev)
	if err != nil {
		t.Fatalf("Attach(%s to node %d): %v", a.IP, i, err)
	}
	return att, n
}

func TestPrivateAttachMoveIdempotent(t *testing.T) {
	w := newWorld(t)
	a := private("10.0.1.50")

	att, n := mustAttach(t, w, 0, a, aws.Attachment{})
	if got := w.d.Holders("10.0.1.50"); !slices.Equal(got, []string{w.eni[0]}) || n != 1 {
		t.Fatalf("attach: holders %v after %d mutating calls, want [%s] after 1", got, n, w.eni[0])
	}
	if att.ENI != w.eni[0] || att.PrivateIP != "10.0.1.50" {
		t.Fatalf("attachment %+v", att)
	}
	if _, n = mustAttach(t, w, 0, a, att); n != 0 {
		t.Fatalf("re-attach where it already is made %d mutating calls, want 0", n)
	}
	w.d.ResetCalls()
	if _, n = mustAttach(t, w, 1, a, att); n != 1 || w.d.Calls("AssignPrivateIpAddresses") != 1 {
		t.Fatalf("move made %d mutating calls (%d assign), want exactly 1 AssignPrivateIpAddresses", n, w.d.Calls("AssignPrivateIpAddresses"))
	}
	if got := w.d.Holders("10.0.1.50"); !slices.Equal(got, []string{w.eni[1]}) {
		t.Fatalf("after move holders %v, want only %s", got, w.eni[1])
	}
	obs, err := w.p.Observe(context.Background(), a, "vpc-1")
	if err != nil || len(obs.Holders) != 1 || obs.Holders[0].ENI != w.eni[1] {
		t.Fatalf("Observe = %+v, %v", obs, err)
	}

	if err := w.p.Release(context.Background(), a, "vpc-1", att); err != nil {
		t.Fatal(err)
	}
	if got := w.d.Holders("10.0.1.50"); len(got) != 0 {
		t.Fatalf("after Release holders %v", got)
	}
}

// lenient makes AssignPrivateIpAddresses leave a reassigned address on its
// old ENI too, as moto does, and can make UnassignPrivateIpAddresses a
// silent no-op.
type lenient struct {
	*ec2double.Double
	ignoreUnassign bool
}

func (l *lenient) AssignPrivateIpAddresses(ctx context.Context, in *ec2.AssignPrivateIpAddressesInput, o ...func(*ec2.Options)) (*ec2.AssignPrivateIpAddressesOutput, error) { //nolint:revive // the SDK names it so
	var before []string
	for _, ip := range in.PrivateIpAddresses {
		before = append(before, l.Holders(ip)...)
	}
	out, err := l.Double.AssignPrivateIpAddresses(ctx, in, o...)
	for _, eni := range before {
		for _, ip := range in.PrivateIpAddresses {
			l.Leak(eni, ip)
		}
	}
	return out, err
}

func (l *lenient) UnassignPrivateIpAddresses(ctx context.Context, in *ec2.UnassignPrivateIpAddressesInput, o ...func(*ec2.Options)) (*ec2.UnassignPrivateIpAddressesOutput, error) { //nolint:revive // the SDK names it so
	if l.ignoreUnassign {
		return &ec2.UnassignPrivateIpAddressesOutput{}, nil
	}
	return l.Double.UnassignPrivateIpAddresses(ctx, in, o...)
}

func TestPrivateVerificationRemovesLeftover(t *testing.T) {
	w := newWorld(t)
	w.d.PageSize = 1 // the leftover is on another page than the target
	l := &lenient{Double: w.d}
	w.p = aws.NewWithEC2(l, aws.Options{})
	a := private("10.0.1.50")
	mustAttach(t, w, 0, a, aws.Attachment{})
	w.d.ResetCalls()
	_, n := mustAttach(t, w, 1, a, aws.Attachment{})
	if got := w.d.Holders("10.0.1.50"); !slices.Equal(got, []string{w.eni[1]}) {
		t.Fatalf("holders %v: the leftover on %s was not removed", got, w.eni[0])
	}
	if n != 2 || w.d.Calls("UnassignPrivateIpAddresses") != 1 {
		t.Fatalf("%d mutating calls, %d unassign; want the move plus 1 explicit unassign", n, w.d.Calls("UnassignPrivateIpAddresses"))
	}

	l.ignoreUnassign = true
	_, _, err := w.attach(t, 0, a, aws.Attachment{})
	if aws.ReasonOf(err) != aws.ReasonVerificationFailed || !strings.Contains(err.Error(), w.eni[1]) {
		t.Fatalf("a leftover that cannot be removed must fail verification naming %s; got %v", w.eni[1], err)
	}
}

func TestPrivateAddressNotInNodeSubnets(t *testing.T) {
	w := newWorld(t)
	_, err := w.p.Resolve(context.Background(), w.node[2], private("10.0.1.50"))
	var e *aws.Error
	if !errors.As(err, &e) || e.Reason != aws.ReasonAddressNotInNodeSubnets {
		t.Fatalf("got %v, want reason AddressNotInNodeSubnets", err)
	}
	for _, want := range []string{"10.0.1.50", w.eni[2], w.subnetB, "10.0.2.0/24"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("message %q does not name %s", e.Message, want)
		}
	}
	if w.d.Mutating() != 0 {
		t.Fatal("a refused address made mutating calls")
	}
}

func TestPrivatePrimaryOfAnotherENIRefused(t *testing.T) {
	w := newWorld(t)
	primary := w.d.PrivateIPs(w.eni[1])[0]
	_, _, err := w.attach(t, 0, private(primary), aws.Attachment{})
	if aws.ReasonOf(err) != aws.ReasonAddressInUse || w.d.Mutating() != 0 {
		t.Fatalf("got %v after %d mutating calls, want AddressInUse and none", err, w.d.Mutating())
	}
}

func TestPublicAttachMoveRelease(t *testing.T) {
	w := newWorld(t)
	a := public("192.0.2.10")

	att, n := mustAttach(t, w, 0, a, aws.Attachment{})
	if w.d.Calls("AllocateAddress") != 1 || w.d.Calls("AssociateAddress") != 1 || n != 3 {
		t.Fatalf("first attach: %d mutating calls, want allocate + assign + associate", n)
	}
	alloc, eni, priv, _ := w.d.EIP("192.0.2.10")
	if eni != w.eni[0] || priv != att.PrivateIP || alloc != att.AllocationID || !slices.Contains(w.d.PrivateIPs(w.eni[0]), priv) {
		t.Fatalf("EIP %s on %s/%s, attachment %+v", alloc, eni, priv, att)
	}
	if _, n = mustAttach(t, w, 0, a, att); n != 0 {
		t.Fatalf("re-attach made %d mutating calls, want 0", n)
	}

	// Same subnet: the private IP moves with reassignment, the association
	// moves with it.
	w.d.ResetCalls()
	att2, n := mustAttach(t, w, 1, a, att)
	_, eni, priv, _ = w.d.EIP("192.0.2.10")
	if n > 2 || eni != w.eni[1] || priv != att.PrivateIP || att2.PrivateIP != priv {
		t.Fatalf("move in subnet: %d mutating calls, EIP on %s/%s; want <= 2 and %s/%s", n, eni, priv, w.eni[1], att.PrivateIP)
	}
	if got := w.d.Holders(priv); !slices.Equal(got, []string{w.eni[1]}) {
		t.Fatalf("private IP %s held by %v", priv, got)
	}
	t.Logf("public move within a subnet: %d mutating call(s)", n)

	// Another subnet: a new secondary IP there and re-association (two
	// mutating calls); the old private IP is left for GiveBack.
	w.d.ResetCalls()
	att3, n := mustAttach(t, w, 2, a, att2)
	_, eni, priv, _ = w.d.EIP("192.0.2.10")
	if eni != w.eni[2] || priv != att3.PrivateIP || w.d.Calls("AssociateAddress") != 1 || n != 2 {
		t.Fatalf("move across subnets: %d mutating calls, EIP on %s/%s, attachment %+v; want 2 calls", n, eni, priv, att3)
	}
	want := []aws.PrivateIP{{ENI: w.eni[1], IP: att2.PrivateIP}}
	if !slices.Equal(att3.GiveBack, want) {
		t.Fatalf("GiveBack %+v, want %+v", att3.GiveBack, want)
	}
	w.d.ResetCalls()
	if left, err := w.p.GiveBack(context.Background(), a, "vpc-1", att3.GiveBack); err != nil || len(left) != 0 {
		t.Fatalf("GiveBack: %v left, %v", left, err)
	}
	if got := w.d.Holders(att2.PrivateIP); len(got) != 0 || w.d.Mutating() != 1 {
		t.Fatalf("old private IP %s still on %v after %d mutating calls; want given back with one", att2.PrivateIP, got, w.d.Mutating())
	}
	if _, eni, priv, _ = w.d.EIP("192.0.2.10"); eni != w.eni[2] || priv != att3.PrivateIP {
		t.Fatalf("GiveBack moved the Elastic IP to %s/%s", eni, priv)
	}

	if err := w.p.Release(context.Background(), a, "vpc-1", att3); err != nil {
		t.Fatal(err)
	}
	if _, _, _, ok := w.d.EIP("192.0.2.10"); ok || len(w.d.Holders(att3.PrivateIP)) != 0 {
		t.Fatal("Release left the kubext-allocated EIP or its private IP behind")
	}
}

func TestPublicRestartReusesAllocation(t *testing.T) {
	w := newWorld(t)
	a := public("192.0.2.11")
	// The first attach allocates, then fails before associating.
	w.d.Fail("AssociateAddress", ec2double.APIError("InternalError", "An internal error has occurred"))
	partial, _, err := w.attach(t, 0, a, aws.Attachment{})
	if err == nil || partial.AllocationID == "" || partial.PrivateIP == "" {
		t.Fatalf("want an error with what was handed out; got %+v, %v", partial, err)
	}
	// A new provider (the operator restarted) finds the tagged allocation
	// and the recorded private IP, and allocates and assigns nothing new.
	w.p = aws.NewWithEC2(w.d, aws.Options{})
	w.d.ResetCalls()
	att, n := mustAttach(t, w, 0, a, partial)
	if w.d.Calls("AllocateAddress") != 0 || w.d.Calls("AssignPrivateIpAddresses") != 0 || n != 1 {
		t.Fatalf("restart: %d allocate, %d assign, %d mutating; want only the association", w.d.Calls("AllocateAddress"), w.d.Calls("AssignPrivateIpAddresses"), n)
	}
	if att.AllocationID != partial.AllocationID || att.PrivateIP != partial.PrivateIP {
		t.Fatalf("restart attachment %+v, want allocation and private IP of %+v", att, partial)
	}
	w.p = aws.NewWithEC2(w.d, aws.Options{})
	if _, n = mustAttach(t, w, 0, a, aws.Attachment{}); n != 0 {
		t.Fatalf("second restart, nothing recorded: %d mutating calls, want 0", n)
	}
}

func TestPublicUserEIPNeverReleased(t *testing.T) {
	w := newWorld(t)
	a := public("192.0.2.12")
	alloc := w.d.AddEIP("192.0.2.12", pool, nil)
	att, _ := mustAttach(t, w, 0, a, aws.Attachment{})
	if w.d.Calls("AllocateAddress") != 0 || att.AllocationID != alloc {
		t.Fatalf("user EIP not reused: %+v", att)
	}
	if err := w.p.Release(context.Background(), a, "vpc-1", att); err != nil {
		t.Fatal(err)
	}
	got, eni, _, ok := w.d.EIP("192.0.2.12")
	if !ok || got != alloc || w.d.Calls("ReleaseAddress") != 0 {
		t.Fatal("an Elastic IP a user allocated was released")
	}
	if eni != "" || len(w.d.Holders(att.PrivateIP)) != 0 {
		t.Fatalf("user EIP still associated with %s or private IP %s still assigned", eni, att.PrivateIP)
	}

	// One tagged for another IP object is refused, untouched.
	w.d.AddEIP("192.0.2.13", pool, map[string]string{aws.TagKey: "other"})
	w.d.ResetCalls()
	if _, n, err := w.attach(t, 0, public("192.0.2.13"), aws.Attachment{}); aws.ReasonOf(err) != aws.ReasonAddressInUse || n != 0 {
		t.Fatalf("EIP of another IP: %v after %d mutating calls", err, n)
	}
}

func TestErrorsMapped(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(*world)
		public bool
		reason string
		words  []string
	}{
		{"UnauthorizedOperation", func(w *world) {
			w.d.Fail("AssignPrivateIpAddresses", ec2double.APIError("UnauthorizedOperation", "You are not authorized to perform this operation."))
		}, false, aws.ReasonIAMPermissionMissing, []string{"ec2:AssignPrivateIpAddresses", "UnauthorizedOperation"}},
		{"PrivateIpAddressLimitExceeded", func(w *world) { w.d.SetIPLimit(w.eni[0], 1) },
			false, aws.ReasonSecondaryIPLimit, []string{"AssignPrivateIpAddresses", "PrivateIpAddressLimitExceeded", "instance type"}},
		{"AddressLimitExceeded", func(w *world) { w.d.EIPQuota = 0 },
			true, aws.ReasonEIPQuota, []string{"AllocateAddress", "AddressLimitExceeded", "quota"}},
		{"RequestLimitExceeded", func(w *world) {
			w.d.Fail("DescribeAddresses", ec2double.APIError("RequestLimitExceeded", "Request limit exceeded."))
		}, true, aws.ReasonThrottled, []string{"DescribeAddresses", "RequestLimitExceeded"}},
		{"InvalidAddress.NotFound", func(w *world) {
			w.d.Fail("DescribeAddresses", ec2double.APIError("InvalidAddress.NotFound", "Address '192.0.2.20' not found."))
		}, true, aws.ReasonAddressNotFound, []string{"DescribeAddresses", "InvalidAddress.NotFound"}},
		{"UnauthorizedOperation on AssociateAddress", func(w *world) {
			w.d.Fail("AssociateAddress", ec2double.APIError("UnauthorizedOperation", "You are not authorized to perform this operation."))
		}, true, aws.ReasonIAMPermissionMissing, []string{"ec2:AssociateAddress"}},
		{"address outside the pool", func(w *world) { w.d.AddPool("ipv4pool-ec2-other", "198.18.0.0/24") },
			true, aws.ReasonEC2Error, []string{"AllocateAddress", "InvalidParameterValue"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			tc.setup(w)
			a := private("10.0.1.60")
			if tc.public {
				a = public("192.0.2.20")
				if tc.name == "address outside the pool" {
					a.IP = netip.MustParseAddr("203.0.113.9")
				}
			}
			_, _, err := w.attach(t, 0, a, aws.Attachment{})
			var e *aws.Error
			if !errors.As(err, &e) || e.Reason != tc.reason {
				t.Fatalf("got %v, want reason %s", err, tc.reason)
			}
			for _, word := range tc.words {
				if !strings.Contains(e.Message, word) {
					t.Errorf("message %q does not say %q", e.Message, word)
				}
			}
		})
	}
	w := newWorld(t)
	for _, id := range []string{"aws:///us-east-1a/i-00000000000000000", "gce://p/z/n", "aws:///us-east-1a/"} {
		if _, err := w.p.Resolve(context.Background(), id, private("10.0.1.50")); aws.ReasonOf(err) != aws.ReasonInstanceNotFound {
			t.Errorf("Resolve(%q) = %v, want InstanceNotFound", id, err)
		}
	}
}

// TestUnmanagedENIPreferred: an ENI tagged node.k8s.amazonaws.com/no_manage
// (left alone by the AWS VPC CNI) is chosen over the primary ENI, in the
// address's subnet in private mode and over device index 0 in public mode.
func TestUnmanagedENIPreferred(t *testing.T) {
	w := newWorld(t)
	inst := strings.TrimPrefix(w.node[0], "aws:///us-east-1a/")
	other := w.d.AttachENI(inst, w.subnetB, map[string]string{aws.UnmanagedTagKey: "true"})
	unmanaged := w.d.AttachENI(inst, w.subnetA, map[string]string{aws.UnmanagedTagKey: "true"})
	ctx := context.Background()
	for _, tc := range []struct {
		a    aws.Address
		want string
	}{
		{private("10.0.1.50"), unmanaged},
		{private("10.0.2.50"), other},
		{public("192.0.2.10"), other}, // the first unmanaged ENI by device index
	} {
		got, err := w.p.Resolve(ctx, w.node[0], tc.a)
		if err != nil || got.ENI != tc.want {
			t.Errorf("Resolve(%s) = %s, %v; want %s", tc.a.IP, got.ENI, err, tc.want)
		}
	}
	// Without unmanaged ENIs, public mode takes device index 0.
	if got, err := w.p.Resolve(ctx, w.node[1], public("192.0.2.10")); err != nil || got.ENI != w.eni[1] {
		t.Errorf("Resolve(node 1, public) = %s, %v; want %s", got.ENI, err, w.eni[1])
	}
}

// dropsAssociation is an EC2 that does not carry an Elastic IP along with a
// reassigned private IP: the provider must re-associate, still within two
// mutating calls.
type dropsAssociation struct{ *ec2double.Double }

func (d dropsAssociation) AssignPrivateIpAddresses(ctx context.Context, in *ec2.AssignPrivateIpAddressesInput, o ...func(*ec2.Options)) (*ec2.AssignPrivateIpAddressesOutput, error) { //nolint:revive // the SDK names it so
	out, err := d.Double.AssignPrivateIpAddresses(ctx, in, o...)
	eips, _ := d.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{})
	for _, x := range eips.Addresses {
		if x.AssociationId != nil && slices.Contains(in.PrivateIpAddresses, *x.PrivateIpAddress) {
			_, _ = d.DisassociateAddress(ctx, &ec2.DisassociateAddressInput{AssociationId: x.AssociationId})
		}
	}
	return out, err
}

func TestPublicMoveReassociatesWhenAssociationDropped(t *testing.T) {
	w := newWorld(t)
	a := public("192.0.2.10")
	att, _ := mustAttach(t, w, 0, a, aws.Attachment{})
	w.p = aws.NewWithEC2(dropsAssociation{w.d}, aws.Options{})
	w.d.ResetCalls()
	_, n := mustAttach(t, w, 1, a, att)
	_, eni, priv, _ := w.d.EIP("192.0.2.10")
	// The double's own Disassociate in the wrapper counts as a call too.
	if moves := n - w.d.Calls("DisassociateAddress"); moves != 2 || w.d.Calls("AssociateAddress") != 1 {
		t.Fatalf("%d mutating calls by the provider, want 2 (assign with reassignment, re-associate)", moves)
	}
	if eni != w.eni[1] || priv != att.PrivateIP {
		t.Fatalf("EIP on %s/%s, want %s/%s", eni, priv, w.eni[1], att.PrivateIP)
	}
}

// TestDetachKeepsAllocation: Detach (no holder any more) takes the address
// off the node but keeps the Elastic IP, which the next Attach reuses.
func TestDetachKeepsAllocation(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	a := public("192.0.2.14")
	att, _ := mustAttach(t, w, 0, a, aws.Attachment{})
	if err := w.p.Detach(ctx, a, "vpc-1", att); err != nil {
		t.Fatal(err)
	}
	alloc, eni, _, ok := w.d.EIP("192.0.2.14")
	if !ok || alloc != att.AllocationID || eni != "" || len(w.d.Holders(att.PrivateIP)) != 0 || w.d.Calls("ReleaseAddress") != 0 {
		t.Fatalf("after Detach: EIP %s (exists %v) on %q, private IP on %v", alloc, ok, eni, w.d.Holders(att.PrivateIP))
	}
	w.d.ResetCalls()
	if att2, _ := mustAttach(t, w, 1, a, att); att2.AllocationID != alloc || w.d.Calls("AllocateAddress") != 0 {
		t.Fatalf("re-attach after Detach allocated again: %+v", att2)
	}

	p := private("10.0.1.52")
	patt, _ := mustAttach(t, w, 0, p, aws.Attachment{})
	if err := w.p.Detach(ctx, p, "vpc-1", patt); err != nil || len(w.d.Holders("10.0.1.52")) != 0 {
		t.Fatalf("private Detach: %v, holders %v", err, w.d.Holders("10.0.1.52"))
	}
}

func TestInstanceIDFromProviderID(t *testing.T) {
	for in, want := range map[string]string{
		"aws:///us-east-1a/i-0abc":   "i-0abc",
		"aws://us-east-1a/i-0abc":    "i-0abc",
		"aws:///i-0abc":              "i-0abc",
		"aws:///us-east-1a/":         "",
		"aws:///us-east-1a/vol-0abc": "",
		"gce://project/zone/node":    "",
		"":                           "",
	} {
		got, err := aws.InstanceIDFromProviderID(in)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("InstanceIDFromProviderID(%q) = %q, %v; want %q", in, got, err, want)
		}
		if err != nil && aws.ReasonOf(err) != aws.ReasonInstanceNotFound {
			t.Errorf("InstanceIDFromProviderID(%q): reason %s", in, aws.ReasonOf(err))
		}
	}
}
