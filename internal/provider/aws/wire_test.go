package aws_test

import (
	"context"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/kubext/kubext/internal/provider/aws"
	"github.com/kubext/kubext/internal/provider/aws/ec2double"
)

// wireWorld is newWorld with the provider talking to the double over
// HTTP through the real SDK client (EC2's query protocol, signing, the
// retryer, the XML deserializers), as the lab and the benchmark use it.
func wireWorld(t *testing.T) *world {
	t.Helper()
	w := newWorld(t)
	srv := httptest.NewServer(w.d.Handler())
	t.Cleanup(srv.Close)
	p, err := aws.New(context.Background(), aws.Options{Region: "us-east-1", Endpoint: srv.URL, MaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")})
	if err != nil {
		t.Fatal(err)
	}
	w.p = p
	return w
}

// Over the wire the double keeps EC2's semantics where moto does not: a
// move is one AssignPrivateIpAddresses that leaves the address on one ENI
// only, and an address another ENI holds is refused without
// AllowReassignment, with EC2's error code.
func TestWirePrivateMove(t *testing.T) {
	w := wireWorld(t)
	a := private("10.0.1.60")
	att, n := mustAttach(t, w, 0, a, aws.Attachment{})
	if n != 1 || att.ENI != w.eni[0] {
		t.Fatalf("attach: %+v after %d mutating calls", att, n)
	}
	w.d.ResetCalls()
	if _, n = mustAttach(t, w, 1, a, att); n != 1 || w.d.Calls("UnassignPrivateIpAddresses") != 0 {
		t.Fatalf("move made %d mutating calls (%d unassign), want 1 and no clean-up", n, w.d.Calls("UnassignPrivateIpAddresses"))
	}
	if got := w.d.Holders("10.0.1.60"); !slices.Equal(got, []string{w.eni[1]}) {
		t.Fatalf("holders %v, want only %s", got, w.eni[1])
	}
	w.d.Fail("AssignPrivateIpAddresses", ec2double.APIError("UnauthorizedOperation", "You are not authorized to perform this operation."))
	_, _, err := w.attach(t, 0, a, att)
	if aws.ReasonOf(err) != aws.ReasonIAMPermissionMissing {
		t.Fatalf("refused assign: reason %q (%v), want %s", aws.ReasonOf(err), err, aws.ReasonIAMPermissionMissing)
	}
	if err := w.p.Release(context.Background(), a, "vpc-1", att); err != nil {
		t.Fatal(err)
	}
	if got := w.d.Holders("10.0.1.60"); len(got) != 0 {
		t.Fatalf("after Release holders %v", got)
	}
}

// Public mode over the wire: allocate from the pool with the tag,
// associate with a secondary private IP, move within the subnet, and
// release only the tagged Elastic IP.
func TestWirePublicMoveAndRelease(t *testing.T) {
	w := wireWorld(t)
	a := public("192.0.2.70")
	att, _ := mustAttach(t, w, 0, a, aws.Attachment{})
	alloc, eni, priv, ok := w.d.EIP("192.0.2.70")
	if !ok || eni != w.eni[0] || att.AllocationID != alloc || att.PrivateIP != priv || att.AssociationID == "" {
		t.Fatalf("attach: %+v; EC2 has %s on %s/%s", att, alloc, eni, priv)
	}
	att, n := mustAttach(t, w, 1, a, att)
	if _, eni, _, _ = w.d.EIP("192.0.2.70"); eni != w.eni[1] || n > 2 {
		t.Fatalf("move: Elastic IP on %s after %d mutating calls, want %s after at most 2", eni, n, w.eni[1])
	}
	obs, err := w.p.Observe(context.Background(), a, "vpc-1")
	if err != nil || obs.Owner != "web" || obs.ENI != w.eni[1] {
		t.Fatalf("Observe = %+v, %v", obs, err)
	}
	if err := w.p.Release(context.Background(), a, "vpc-1", att); err != nil {
		t.Fatal(err)
	}
	if _, _, _, ok := w.d.EIP("192.0.2.70"); ok {
		t.Fatal("the Elastic IP kubext allocated is not released")
	}
}
