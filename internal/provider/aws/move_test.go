package aws_test

import (
	"context"
	"slices"
	"testing"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/kubext/kubext/internal/provider/aws"
	"github.com/kubext/kubext/internal/provider/aws/ec2double"
)

// status mirrors what the controller records in status.aws from each
// Attach (see record in internal/controller/ip): a restart starts from it
// and nothing else.
type status struct{ att aws.Attachment }

func (s *status) record(att aws.Attachment) {
	if att.ENI != "" {
		s.att.ENI, s.att.PrivateIP, s.att.AssociationID = att.ENI, att.PrivateIP, att.AssociationID
	}
	if att.AllocationID != "" {
		s.att.AllocationID = att.AllocationID
	}
	for _, g := range att.GiveBack {
		if !slices.Contains(s.att.GiveBack, g) {
			s.att.GiveBack = append(s.att.GiveBack, g)
		}
	}
}

// prev is what the controller passes to Attach: the recorded attachment,
// without Seen (a restarted manager has seen nothing).
func (s *status) prev() aws.Attachment {
	p := s.att
	p.Seen = nil
	return p
}

// checkOneHolder asserts that the Elastic IP is associated with the
// recorded private IP on eni, that only eni holds that private IP, and
// that no ENI has any other secondary private IP: nothing leaked.
func checkOneHolder(t *testing.T, w *world, public, eni string, s *status) {
	t.Helper()
	_, on, priv, ok := w.d.EIP(public)
	if !ok || on != eni || priv != s.att.PrivateIP || s.att.ENI != eni {
		t.Fatalf("Elastic IP %s on %q/%q (exists %v), recorded %+v; want on %s", public, on, priv, ok, s.att, eni)
	}
	if got := w.d.Holders(priv); !slices.Equal(got, []string{eni}) {
		t.Fatalf("private IP %s held by %v, want %s only", priv, got, eni)
	}
	for _, e := range w.eni {
		ips := w.d.PrivateIPs(e)
		want := 1
		if e == eni {
			want = 2
		}
		if len(ips) != want {
			t.Fatalf("ENI %s has private IPs %v; want %d (its primary, and %s on %s): a leaked secondary IP", e, ips, want, priv, eni)
		}
	}
}

// giveBack runs what the controller runs after recording a move.
func giveBack(t *testing.T, w *world, a aws.Address, s *status) {
	t.Helper()
	left, err := w.p.GiveBack(context.Background(), a, "vpc-1", s.att.GiveBack)
	s.att.GiveBack = left
	if err != nil {
		t.Fatalf("GiveBack: %v", err)
	}
}

// TestPublicCrossSubnetMoveFailures moves an Elastic IP across subnets
// with a failure injected at each step, then retries with a restarted
// provider from the recorded status: the move completes, the give-back
// follows, and one ENI holds it with nothing leaked.
func TestPublicCrossSubnetMoveFailures(t *testing.T) {
	for _, step := range []struct{ action string }{
		{"AssignPrivateIpAddresses"}, // the new secondary IP
		{"AssociateAddress"},         // the re-association
		{"DescribeAddresses"},        // the verifying describe
		{"DescribeNetworkInterfaces"},
		{"UnassignPrivateIpAddresses"}, // the give-back
	} {
		t.Run(step.action, func(t *testing.T) {
			w := newWorld(t)
			a := public("192.0.2.20")
			s := &status{}
			att, _ := mustAttach(t, w, 1, a, s.prev())
			s.record(att)
			checkOneHolder(t, w, "192.0.2.20", w.eni[1], s)

			ctx := context.Background()
			target, err := w.p.Resolve(ctx, w.node[2], a)
			if err != nil {
				t.Fatal(err)
			}
			prev := s.prev()
			prev.Seen = att.Seen // the same manager verified it
			failGiveBack := step.action == "UnassignPrivateIpAddresses"
			if !failGiveBack {
				// The fault hits the move's own call of that action: the
				// reads before it are spared by Seen except the holders of
				// the private IP, so skip that one for DescribeNetworkInterfaces.
				if step.action == "DescribeNetworkInterfaces" {
					w.d.Fail(step.action, nil)
				}
				w.d.Fail(step.action, ec2double.APIError("InternalError", "An internal error has occurred"))
			}
			got, err := w.p.Attach(ctx, a, target, prev, nil)
			s.record(got)
			if failGiveBack {
				if err != nil {
					t.Fatal(err)
				}
				w.d.Fail(step.action, ec2double.APIError("UnauthorizedOperation", "not allowed"))
				left, gerr := w.p.GiveBack(ctx, a, "vpc-1", s.att.GiveBack)
				if gerr == nil || len(left) != 1 {
					t.Fatalf("GiveBack with a failing unassign: %v left, error %v", left, gerr)
				}
				s.att.GiveBack = left
			} else if err == nil {
				t.Fatalf("Attach succeeded with %s failing", step.action)
			}

			// Restart: a new provider, from the recorded status only.
			w.p = aws.NewWithEC2(w.d, aws.Options{})
			w.d.ResetCalls()
			att2, n := mustAttach(t, w, 2, a, s.prev())
			s.record(att2)
			if w.d.Calls("AllocateAddress") != 0 || n > 2 {
				t.Fatalf("retry: %d mutating calls, %d allocations; want at most 2, none", n, w.d.Calls("AllocateAddress"))
			}
			giveBack(t, w, a, s)
			checkOneHolder(t, w, "192.0.2.20", w.eni[2], s)
			if len(s.att.GiveBack) != 0 {
				t.Fatalf("left to give back: %+v", s.att.GiveBack)
			}
		})
	}
}

// TestPublicRestartAfterMoveBeforeRecord: the manager dies after the
// re-association, before the status write; the restarted one finds the
// Elastic IP on the target, makes no mutating call for it, and gives back
// the private IP the old status still names.
func TestPublicRestartAfterMoveBeforeRecord(t *testing.T) {
	w := newWorld(t)
	a := public("192.0.2.21")
	s := &status{}
	att, _ := mustAttach(t, w, 0, a, s.prev())
	s.record(att)
	if _, n := mustAttach(t, w, 2, a, s.prev()); n != 2 { // not recorded: the crash
		t.Fatalf("cross-subnet move: %d mutating calls, want 2", n)
	}
	w.p = aws.NewWithEC2(w.d, aws.Options{})
	w.d.ResetCalls()
	att2, n := mustAttach(t, w, 2, a, s.prev())
	s.record(att2)
	if n != 0 || len(att2.GiveBack) != 1 || att2.GiveBack[0] != (aws.PrivateIP{ENI: w.eni[0], IP: att.PrivateIP}) {
		t.Fatalf("after the restart: %d mutating calls, GiveBack %+v; want 0 and %s on %s", n, att2.GiveBack, att.PrivateIP, w.eni[0])
	}
	giveBack(t, w, a, s)
	checkOneHolder(t, w, "192.0.2.21", w.eni[2], s)
	// Released on delete: nothing of it is left.
	if err := w.p.Release(context.Background(), a, "vpc-1", s.prev()); err != nil {
		t.Fatal(err)
	}
	for _, e := range w.eni {
		if ips := w.d.PrivateIPs(e); len(ips) != 1 {
			t.Fatalf("after Release, ENI %s has %v", e, ips)
		}
	}
	if _, _, _, ok := w.d.EIP("192.0.2.21"); ok {
		t.Fatal("Release left the Elastic IP")
	}
}

// TestReleaseGivesBackPending: an IP deleted before the give-back ran
// leaves nothing behind.
func TestReleaseGivesBackPending(t *testing.T) {
	w := newWorld(t)
	a := public("192.0.2.22")
	s := &status{}
	att, _ := mustAttach(t, w, 0, a, s.prev())
	s.record(att)
	att, _ = mustAttach(t, w, 2, a, s.prev())
	s.record(att)
	if len(s.att.GiveBack) != 1 {
		t.Fatalf("GiveBack %+v, want one", s.att.GiveBack)
	}
	if err := w.p.Release(context.Background(), a, "vpc-1", s.prev()); err != nil {
		t.Fatal(err)
	}
	for _, e := range w.eni {
		if ips := w.d.PrivateIPs(e); len(ips) != 1 {
			t.Fatalf("after Release, ENI %s has %v", e, ips)
		}
	}
}

// TestGiveBackSparesAnAssociatedAddress: a private IP the Elastic IP is
// associated with again is not unassigned.
func TestGiveBackSparesAnAssociatedAddress(t *testing.T) {
	w := newWorld(t)
	a := public("192.0.2.23")
	att, _ := mustAttach(t, w, 0, a, aws.Attachment{})
	left, err := w.p.GiveBack(context.Background(), a, "vpc-1", []aws.PrivateIP{{ENI: w.eni[0], IP: att.PrivateIP}})
	if err != nil || len(left) != 0 || w.d.Calls("UnassignPrivateIpAddresses") != 0 {
		t.Fatalf("GiveBack of the associated private IP: %v left, %v, %d unassigns", left, err, w.d.Calls("UnassignPrivateIpAddresses"))
	}
	if _, eni, priv, _ := w.d.EIP("192.0.2.23"); eni != w.eni[0] || priv != att.PrivateIP {
		t.Fatalf("Elastic IP on %s/%s", eni, priv)
	}
}

// TestSeenSparesReadsBeforeAMove: with what the last verification saw,
// a move makes only its mutating call(s) and the describes after them.
func TestSeenSparesReadsBeforeAMove(t *testing.T) {
	w := newWorld(t)
	p := private("10.0.1.60")
	att, _ := mustAttach(t, w, 0, p, aws.Attachment{})
	if att.Seen == nil {
		t.Fatal("Attach returned no Seen")
	}
	if calls, n := attachCalls(t, w, 1, p, att); n != 1 || calls != 2 {
		t.Fatalf("private move with Seen: %d calls (%d mutating), want assign + one describe", calls, n)
	}
	if got := w.d.Holders("10.0.1.60"); !slices.Equal(got, []string{w.eni[1]}) {
		t.Fatalf("holders %v", got)
	}

	a := public("192.0.2.24")
	patt, _ := mustAttach(t, w, 0, a, aws.Attachment{})
	// Holders of the private IP (read afresh), assign, describe the
	// Elastic IP, describe the holders.
	if calls, n := attachCalls(t, w, 1, a, patt); n != 1 || calls != 4 {
		t.Fatalf("public move in a subnet with Seen: %d calls (%d mutating), want 4 (1)", calls, n)
	}
	if _, eni, priv, _ := w.d.EIP("192.0.2.24"); eni != w.eni[1] || priv != patt.PrivateIP {
		t.Fatalf("Elastic IP on %s/%s", eni, priv)
	}
	// Without Seen (a restarted manager), the same move back first
	// describes the Elastic IP too.
	prev := patt
	prev.ENI, prev.Seen = w.eni[1], nil
	if calls, n := attachCalls(t, w, 0, a, prev); n != 1 || calls != 5 {
		t.Fatalf("public move in a subnet without Seen: %d calls (%d mutating), want 5 (1)", calls, n)
	}
}

// TestStaleSeenIsSafe: what the last verification saw has changed behind
// the manager's back; the move still ends with one holder, verified.
func TestStaleSeenIsSafe(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	p := private("10.0.1.61")
	att, _ := mustAttach(t, w, 0, p, aws.Attachment{})
	// Someone moves it to node 1; the manager still believes node 0.
	if _, err := w.d.AssignPrivateIpAddresses(ctx, assignInput(w.eni[1], "10.0.1.61")); err != nil {
		t.Fatal(err)
	}
	if _, _ = mustAttach(t, w, 1, p, att); !slices.Equal(w.d.Holders("10.0.1.61"), []string{w.eni[1]}) {
		t.Fatalf("holders %v", w.d.Holders("10.0.1.61"))
	}
	// And a leftover a lenient EC2 could leave: the check removes it.
	w.d.Leak(w.eni[0], "10.0.1.61")
	stale := att
	stale.Seen = &aws.Observation{Holders: []aws.Holder{{ENI: w.eni[2], SubnetID: w.subnetB}}}
	if _, _ = mustAttach(t, w, 1, p, stale); !slices.Equal(w.d.Holders("10.0.1.61"), []string{w.eni[1]}) {
		t.Fatalf("holders %v after a move on a stale view", w.d.Holders("10.0.1.61"))
	}

	a := public("192.0.2.25")
	s := &status{}
	patt, _ := mustAttach(t, w, 0, a, s.prev())
	s.record(patt)
	// The Elastic IP is re-associated by hand with node 2's primary IP.
	_, eni, _, _ := w.d.EIP("192.0.2.25")
	if eni != w.eni[0] {
		t.Fatal("setup")
	}
	if _, err := w.d.AssociateAddress(ctx, associateInput(patt.AllocationID, w.eni[2])); err != nil {
		t.Fatal(err)
	}
	prev := s.prev()
	prev.Seen = patt.Seen
	att2, _ := mustAttach(t, w, 1, a, prev)
	s.record(att2)
	giveBack(t, w, a, s)
	if _, eni, priv, _ := w.d.EIP("192.0.2.25"); eni != w.eni[1] || priv != att2.PrivateIP || !slices.Equal(w.d.Holders(priv), []string{w.eni[1]}) {
		t.Fatalf("Elastic IP on %s/%s held by %v after a move on a stale view", eni, priv, w.d.Holders(priv))
	}
}

func assignInput(eni, ip string) *ec2.AssignPrivateIpAddressesInput {
	return &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: sdkaws.String(eni), PrivateIpAddresses: []string{ip}, AllowReassignment: sdkaws.Bool(true)}
}

// associateInput associates with the ENI's primary private IP.
func associateInput(alloc, eni string) *ec2.AssociateAddressInput {
	return &ec2.AssociateAddressInput{AllocationId: sdkaws.String(alloc), NetworkInterfaceId: sdkaws.String(eni), AllowReassociation: sdkaws.Bool(true)}
}

// attachCalls resolves node i, then attaches a there and counts the
// Attach's own calls: all, and mutating.
func attachCalls(t *testing.T, w *world, i int, a aws.Address, prev aws.Attachment) (int, int) {
	t.Helper()
	ctx := context.Background()
	target, err := w.p.Resolve(ctx, w.node[i], a)
	if err != nil {
		t.Fatal(err)
	}
	w.d.ResetCalls()
	if _, err := w.p.Attach(ctx, a, target, prev, nil); err != nil {
		t.Fatalf("Attach(%s to node %d): %v", a.IP, i, err)
	}
	return w.d.TotalCalls(), w.d.Mutating()
}
