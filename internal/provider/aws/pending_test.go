package aws_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/kubext/kubext/internal/provider/aws"
	"github.com/kubext/kubext/internal/provider/aws/ec2double"
)

// recorder is what a caller's durable record (the IP's status) holds: the
// intents Attach handed it, in order.
type recorder struct {
	intents []aws.PrivateIP
	// onIntend runs inside each intent, before it is recorded; an error
	// refuses the record.
	onIntend func(aws.PrivateIP) error
}

func (r *recorder) intend(_ context.Context, p aws.PrivateIP) error {
	if r.onIntend != nil {
		if err := r.onIntend(p); err != nil {
			return err
		}
	}
	r.intents = append(r.intents, p)
	return nil
}

func (r *recorder) last() *aws.PrivateIP {
	if len(r.intents) == 0 {
		return nil
	}
	p := r.intents[len(r.intents)-1]
	return &p
}

func (w *world) attachRecorded(t *testing.T, p *aws.Provider, i int, a aws.Address, prev aws.Attachment, r *recorder) (aws.Attachment, error) {
	t.Helper()
	ctx := context.Background()
	target, err := p.Resolve(ctx, w.node[i], a)
	if err != nil {
		t.Fatalf("Resolve(node %d): %v", i, err)
	}
	return p.Attach(ctx, a, target, prev, r.intend)
}

// The new secondary private IP of a first public attach is chosen by
// kubext and on record before EC2 is asked for it.
func TestPublicAttachRecordsTheNewPrivateIPFirst(t *testing.T) {
	w := newWorld(t)
	a := public("192.0.2.10")
	r := &recorder{onIntend: func(p aws.PrivateIP) error {
		if n := w.d.Calls("AssignPrivateIpAddresses"); n != 0 {
			t.Errorf("intent for %s recorded after %d assign calls", p.IP, n)
		}
		if h := w.d.Holders(p.IP); len(h) != 0 {
			t.Errorf("chosen %s is held by %v", p.IP, h)
		}
		return nil
	}}
	att, err := w.attachRecorded(t, w.p, 0, a, aws.Attachment{}, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.intents) != 1 || r.intents[0] != (aws.PrivateIP{ENI: w.eni[0], IP: att.PrivateIP}) {
		t.Fatalf("intents %+v, attachment %+v", r.intents, att)
	}
	ip := netip.MustParseAddr(att.PrivateIP)
	if !netip.MustParsePrefix("10.0.1.0/24").Contains(ip) || att.Pending != nil {
		t.Fatalf("private IP %s outside the node's subnet, or still pending (%+v)", ip, att.Pending)
	}
	if _, eni, priv, _ := w.d.EIP("192.0.2.10"); eni != w.eni[0] || priv != att.PrivateIP {
		t.Fatalf("Elastic IP on %s/%s, want %s/%s", eni, priv, w.eni[0], att.PrivateIP)
	}

	// A record that cannot be written stops the attach before any assign.
	w2 := newWorld(t)
	w2.d.ResetCalls()
	refuse := &recorder{onIntend: func(aws.PrivateIP) error { return errors.New("status write conflict") }}
	if _, err := w2.attachRecorded(t, w2.p, 0, a, aws.Attachment{}, refuse); err == nil {
		t.Fatal("attach went on without its record")
	}
	if n := w2.d.Calls("AssignPrivateIpAddresses"); n != 0 || len(w2.d.PrivateIPs(w2.eni[0])) != 1 {
		t.Fatalf("%d assign calls, ENI holds %v: want none and the primary only", n, w2.d.PrivateIPs(w2.eni[0]))
	}
}

// A manager killed after EC2 assigned the private IP and before it
// recorded EC2's answer (here: the association fails, and only the
// intent is kept) leaves nothing behind: the next manager reuses the
// private IP on the same node, and gives it back when the address goes
// elsewhere or is released. (Without the intent, EC2's count-based assign
// left an address on the ENI that nothing named, and the next attach
// assigned another.)
func TestPublicAttachInterruptedLeavesNothingBehind(t *testing.T) {
	for _, next := range []string{"same node", "node in another subnet", "release"} {
		t.Run(next, func(t *testing.T) {
			w := newWorld(t)
			a := public("192.0.2.20")
			r := &recorder{}
			w.d.Fail("AssociateAddress", ec2double.APIError("InternalError", "killed"))
			if _, err := w.attachRecorded(t, w.p, 0, a, aws.Attachment{}, r); err == nil {
				t.Fatal("the association did not fail")
			}
			pend := r.last()
			if pend == nil || !slices.Contains(w.d.PrivateIPs(w.eni[0]), pend.IP) {
				t.Fatalf("intent %+v; ENI holds %v", pend, w.d.PrivateIPs(w.eni[0]))
			}
			// The restarted manager: no memory, the status holds the intent only.
			p2 := aws.NewWithEC2(w.d, aws.Options{})
			prev := aws.Attachment{Pending: pend}
			switch next {
			case "same node":
				att, err := w.attachRecorded(t, p2, 0, a, prev, &recorder{})
				if err != nil {
					t.Fatal(err)
				}
				if att.PrivateIP != pend.IP || len(w.d.PrivateIPs(w.eni[0])) != 2 || att.Pending != nil || len(att.GiveBack) != 0 {
					t.Fatalf("attachment %+v; ENI holds %v: want the pending %s reused, nothing else", att, w.d.PrivateIPs(w.eni[0]), pend.IP)
				}
			case "node in another subnet":
				att, err := w.attachRecorded(t, p2, 2, a, prev, &recorder{})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(att.GiveBack, *pend) {
					t.Fatalf("give-back %+v misses the pending %+v", att.GiveBack, *pend)
				}
				if left, err := p2.GiveBack(context.Background(), a, "vpc-1", att.GiveBack); err != nil || len(left) != 0 {
					t.Fatalf("GiveBack: %v left, %v", left, err)
				}
				if got := w.d.PrivateIPs(w.eni[0]); len(got) != 1 {
					t.Fatalf("the first node's ENI still holds %v", got)
				}
			case "release":
				if err := p2.Release(context.Background(), a, "vpc-1", prev); err != nil {
					t.Fatal(err)
				}
				if got := w.d.PrivateIPs(w.eni[0]); len(got) != 1 {
					t.Fatalf("after Release the ENI still holds %v", got)
				}
			}
		})
	}
}

// Someone takes the chosen address between kubext's look and its assign:
// EC2 refuses it (no reassignment asked), the other ENI keeps it, and
// kubext records and assigns another.
func TestPublicAttachChoosesAgainWhenTheAddressIsTaken(t *testing.T) {
	w := newWorld(t)
	a := public("192.0.2.30")
	r := &recorder{}
	r.onIntend = func(p aws.PrivateIP) error {
		if len(r.intents) == 0 {
			if _, err := w.d.AssignPrivateIpAddresses(context.Background(), &ec2.AssignPrivateIpAddressesInput{
				NetworkInterfaceId: &w.eni[1], PrivateIpAddresses: []string{p.IP},
			}); err != nil {
				t.Errorf("the other party's assign: %v", err)
			}
		}
		return nil
	}
	att, err := w.attachRecorded(t, w.p, 0, a, aws.Attachment{}, r)
	if err != nil {
		t.Fatal(err)
	}
	taken := r.intents[0].IP
	if len(r.intents) != 2 || att.PrivateIP != r.intents[1].IP || att.PrivateIP == taken {
		t.Fatalf("intents %+v, attachment %+v", r.intents, att)
	}
	if h := w.d.Holders(taken); !slices.Equal(h, []string{w.eni[1]}) {
		t.Fatalf("the taken address is on %v, want the other party's %s only", h, w.eni[1])
	}
}

// A refusal that is not about the address (a limit) is not retried with
// other addresses.
func TestPublicAttachLimitIsNotRetried(t *testing.T) {
	w := newWorld(t)
	w.d.SetIPLimit(w.eni[0], 1)
	r := &recorder{}
	_, err := w.attachRecorded(t, w.p, 0, public("192.0.2.40"), aws.Attachment{}, r)
	if aws.ReasonOf(err) != aws.ReasonSecondaryIPLimit || len(r.intents) != 1 {
		t.Fatalf("err %v (reason %s) after %d intents, want SecondaryIPLimit after 1", err, aws.ReasonOf(err), len(r.intents))
	}
}
