package aws

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// Attachment is what EC2 handed out for an address; the controller records
// it in the IP's status so that a restart finds and reuses it.
type Attachment struct {
	// ENI holds the address (private mode) or the private IP the Elastic IP
	// is associated with (public mode).
	ENI string
	// PrivateIP is the address itself (private mode) or the secondary
	// private IP the Elastic IP is associated with (public mode).
	PrivateIP string
	// AllocationID and AssociationID are the Elastic IP's (public mode).
	AllocationID  string
	AssociationID string
	// GiveBack are secondary private IPs kubext assigned for the Elastic
	// IP on network interfaces it has left (public mode, a move to another
	// subnet): Attach leaves them for GiveBack, after the move is
	// recorded, so that a failover waits for the move's calls only.
	GiveBack []PrivateIP
	// Pending is a secondary private IP kubext chose for the Elastic IP
	// and had recorded (Intend) before it asked EC2 to assign it (public
	// mode): until an attach associates it or gives it back, it may be on
	// its ENI with nothing else naming it. Passed back in prev, Attach
	// reuses it when it is on the target's ENI and gives it back otherwise.
	Pending *PrivateIP
	// Seen is what EC2 showed when Attach last verified this attachment
	// (nil when unknown; it is not recorded in the IP's status). Passed
	// back in prev while it is fresh, it spares the reads before a move
	// to another node; Attach still verifies with a describe after every
	// move, and reads afresh whatever it would not move anyway.
	Seen *Observation
}

// PrivateIP is a secondary private IP of a network interface.
type PrivateIP struct {
	ENI string
	IP  string
}

// Holder is a network interface of the VPC that lists a private address.
type Holder struct {
	ENI        string
	InstanceID string
	SubnetID   string
	Primary    bool
}

// Observation is where an address is according to EC2.
type Observation struct {
	// Holders are the network interfaces of the VPC that list the address
	// (private mode) or the Elastic IP's private IP (public mode). More than
	// one means EC2 (or a double) broke its own guarantee.
	Holders []Holder
	// The Elastic IP (public mode); AllocationID is empty when the address
	// is not allocated in this account and region.
	AllocationID  string
	AssociationID string
	ENI           string
	PrivateIP     string
	// Owner is the value of the Elastic IP's kubext.io/ip tag: the IP object
	// that allocated it; empty for an Elastic IP a user allocated.
	Owner string
}

// Observe reports where a is now according to EC2; vpcID is the VPC whose
// network interfaces are searched for the private address.
func (p *Provider) Observe(ctx context.Context, a Address, vpcID string) (Observation, error) {
	if !a.public() {
		hs, err := p.holders(ctx, vpcID, a.IP.String())
		return Observation{Holders: hs}, err
	}
	eip, err := p.findEIP(ctx, a.IP)
	if err != nil || eip == nil {
		return Observation{}, err
	}
	o := observation(eip)
	if o.PrivateIP != "" {
		o.Holders, err = p.holders(ctx, vpcID, o.PrivateIP)
	}
	return o, err
}

func observation(eip *types.Address) Observation {
	o := Observation{
		AllocationID:  sdkaws.ToString(eip.AllocationId),
		AssociationID: sdkaws.ToString(eip.AssociationId),
		ENI:           sdkaws.ToString(eip.NetworkInterfaceId),
		PrivateIP:     sdkaws.ToString(eip.PrivateIpAddress),
	}
	for _, t := range eip.Tags {
		if sdkaws.ToString(t.Key) == TagKey {
			o.Owner = sdkaws.ToString(t.Value)
		}
	}
	return o
}

// Intend records, where a restart finds it, that Attach is about to ask
// EC2 for a new secondary private IP: the one given, on its ENI. Attach
// makes the call only once Intend returned nil.
type Intend func(context.Context, PrivateIP) error

// Attach puts a on target and returns what EC2 handed out. It is
// idempotent: when a already is where it should be, it makes no mutating
// call. prev is what the last Attach returned (from the IP's status), used
// to reuse a private IP that was assigned before an interrupted attach.
// On an error after a mutating call, the returned Attachment still says
// what was handed out, for the caller to record.
//
// In public mode a new secondary private IP (the first attach, a move to
// another subnet) is chosen by Attach and handed to intend before EC2 is
// asked for it, so that a caller killed between EC2's answer and its own
// record of it finds the address again (prev.Pending) instead of leaving
// it on the ENI for good. A nil intend records nothing.
func (p *Provider) Attach(ctx context.Context, a Address, target NodeTarget, prev Attachment, intend Intend) (Attachment, error) {
	if a.public() {
		att, err := p.attachPublic(ctx, a, target, prev, intend)
		if err == nil {
			att.Pending = nil
		}
		return att, err
	}
	return p.attachPrivate(ctx, a, target, prev)
}

// attachPrivate moves the address with one AssignPrivateIpAddresses with
// AllowReassignment, then verifies. When prev.Seen says the address is on
// another ENI, the move trusts it rather than reading first: the assign
// takes the address from wherever it is, and the describe after it checks.
func (p *Provider) attachPrivate(ctx context.Context, a Address, t NodeTarget, prev Attachment) (Attachment, error) {
	ip := a.IP.String()
	att := Attachment{ENI: t.ENI, PrivateIP: ip}
	var hs []Holder
	if prev.Seen != nil && len(prev.Seen.Holders) > 0 && !heldBy(prev.Seen.Holders, t.ENI) {
		hs = prev.Seen.Holders
	} else {
		var err error
		if hs, err = p.holders(ctx, t.VPCID, ip); err != nil {
			return Attachment{}, err
		}
	}
	if err := refusePrimaryElsewhere(hs, t.ENI, ip); err != nil {
		return Attachment{}, err
	}
	if !heldBy(hs, t.ENI) {
		_, err := p.ec2.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
			NetworkInterfaceId: sdkaws.String(t.ENI),
			PrivateIpAddresses: []string{ip},
			AllowReassignment:  sdkaws.Bool(true),
		})
		if err != nil {
			return Attachment{}, ec2Error("AssignPrivateIpAddresses", fmt.Sprintf("assign %s to %s of %s", ip, t.ENI, t.InstanceID), err)
		} else if hs, err = p.holders(ctx, t.VPCID, ip); err != nil {
			return att, err
		}
	}
	if err := p.ensureOnlyOn(ctx, t, ip, hs); err != nil {
		return att, err
	}
	att.Seen = &Observation{Holders: onlyOn(hs, t.ENI)}
	return att, nil
}

// onlyOn is eni's entry of hs, as the list of holders once the address is
// verified on eni alone.
func onlyOn(hs []Holder, eni string) []Holder {
	for _, h := range hs {
		if h.ENI == eni {
			return []Holder{h}
		}
	}
	return nil
}

// ensureOnlyOn checks that hs (the holders of ip) is exactly the target ENI;
// any other ENI that still lists ip gets an explicit
// UnassignPrivateIpAddresses (EC2's reassignment should have removed it),
// and the holders are listed again.
func (p *Provider) ensureOnlyOn(ctx context.Context, t NodeTarget, ip string, hs []Holder) error {
	if !heldBy(hs, t.ENI) {
		return errorf(ReasonVerificationFailed, "after assigning %s to %s of %s, EC2 DescribeNetworkInterfaces does not list it there (holders: %s)", ip, t.ENI, t.InstanceID, holderList(hs))
	}
	if len(hs) == 1 {
		return nil
	}
	if err := refusePrimaryElsewhere(hs, t.ENI, ip); err != nil {
		return err
	}
	for _, h := range hs {
		if h.ENI == t.ENI {
			continue
		}
		if _, err := p.ec2.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{
			NetworkInterfaceId: sdkaws.String(h.ENI), PrivateIpAddresses: []string{ip},
		}); err != nil {
			return ec2Error("UnassignPrivateIpAddresses", fmt.Sprintf("remove %s from %s, which still lists it after it was moved to %s", ip, h.ENI, t.ENI), err)
		}
	}
	hs, err := p.holders(ctx, t.VPCID, ip)
	if err != nil {
		return err
	}
	if len(hs) != 1 || hs[0].ENI != t.ENI {
		return errorf(ReasonVerificationFailed, "after moving %s to %s and unassigning it elsewhere, EC2 DescribeNetworkInterfaces lists it on %s", ip, t.ENI, holderList(hs))
	}
	return nil
}

// attachPublic allocates the Elastic IP once (tagged), then associates it
// with a secondary private IP of the target ENI. A move within one subnet
// moves that private IP with AssignPrivateIpAddresses and AllowReassignment,
// which carries the association along on EC2 (one mutating call); when it
// did not, or across subnets, AssociateAddress with AllowReassociation (two).
// The private IP a move across subnets leaves behind is returned in
// GiveBack rather than unassigned here: the failover does not wait for it.
func (p *Provider) attachPublic(ctx context.Context, a Address, t NodeTarget, prev Attachment, intend Intend) (Attachment, error) {
	cur, err := p.currentEIP(ctx, a, t, prev)
	if err != nil {
		return Attachment{}, err
	}
	if cur.Owner != "" && cur.Owner != a.Name {
		return Attachment{}, errorf(ReasonAddressInUse, "Elastic IP %s (%s) is tagged %s=%s: another IP object allocated it", a.IP, cur.AllocationID, TagKey, cur.Owner)
	}
	att := Attachment{ENI: t.ENI, AllocationID: cur.AllocationID}
	if cur.ENI == t.ENI && heldBy(cur.Holders, t.ENI) {
		att.PrivateIP, att.AssociationID = cur.PrivateIP, cur.AssociationID
		att.GiveBack = pendingLeft(prev, att, leftBehind(cur, a, prev, att))
		return p.verifyPublic(ctx, a, t, att, nil)
	}

	moveAlong := cur.PrivateIP != "" && isSecondaryIn(cur.Holders, cur.ENI, t.SubnetID)
	switch {
	case moveAlong:
		att.PrivateIP = cur.PrivateIP
		if _, err := p.ec2.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
			NetworkInterfaceId: sdkaws.String(t.ENI), PrivateIpAddresses: []string{cur.PrivateIP}, AllowReassignment: sdkaws.Bool(true),
		}); err != nil {
			return att, ec2Error("AssignPrivateIpAddresses", fmt.Sprintf("move %s (private IP of Elastic IP %s) to %s of %s", cur.PrivateIP, a.IP, t.ENI, t.InstanceID), err)
		}
		eip, err := p.findEIP(ctx, a.IP)
		if err != nil {
			return att, err
		}
		if eip != nil {
			if now := observation(eip); now.ENI == t.ENI && now.PrivateIP == att.PrivateIP {
				att.AssociationID = now.AssociationID
				att.GiveBack = pendingLeft(prev, att, leftBehind(cur, a, prev, att))
				return p.verifyPublic(ctx, a, t, att, eip)
			}
		}
	case prev.PrivateIP != "" && prev.ENI == t.ENI && heldBySecondary(ctx, p, t, prev.PrivateIP):
		// An earlier attach assigned this private IP and was interrupted
		// before associating: reuse it rather than assign another.
		att.PrivateIP = prev.PrivateIP
	case prev.Pending != nil && prev.Pending.ENI == t.ENI && heldBySecondary(ctx, p, t, prev.Pending.IP):
		// The same, interrupted before its answer was recorded.
		att.PrivateIP = prev.Pending.IP
	default:
		att.Pending = prev.Pending
		priv, err := p.assignNew(ctx, a, t, intend, &att)
		if err != nil {
			return att, err
		}
		att.PrivateIP = priv
	}
	aout, err := p.ec2.AssociateAddress(ctx, &ec2.AssociateAddressInput{
		AllocationId: sdkaws.String(att.AllocationID), NetworkInterfaceId: sdkaws.String(t.ENI),
		PrivateIpAddress: sdkaws.String(att.PrivateIP), AllowReassociation: sdkaws.Bool(true),
	})
	if err != nil {
		return att, ec2Error("AssociateAddress", fmt.Sprintf("associate Elastic IP %s with %s on %s of %s", a.IP, att.PrivateIP, t.ENI, t.InstanceID), err)
	}
	att.AssociationID = sdkaws.ToString(aout.AssociationId)
	att.GiveBack = pendingLeft(prev, att, leftBehind(cur, a, prev, att))
	return p.verifyPublic(ctx, a, t, att, nil)
}

// currentEIP is the Elastic IP as it is now, with the holders of its
// private IP; it allocates the Elastic IP if there is none. When prev.Seen
// (verified moments ago) has the Elastic IP on another ENI, its
// association is taken from there, and only the private IP's holders are
// read afresh: the Elastic IP is kubext's to move, but its private IP
// belongs to the subnet, whose free addresses others hand out too.
func (p *Provider) currentEIP(ctx context.Context, a Address, t NodeTarget, prev Attachment) (Observation, error) {
	var cur Observation
	if s := prev.Seen; s != nil && s.AllocationID != "" && s.AllocationID == prev.AllocationID && s.ENI != "" && s.ENI != t.ENI {
		cur = *s
	} else {
		eip, err := p.findEIP(ctx, a.IP)
		if err != nil {
			return Observation{}, err
		}
		if eip == nil {
			if eip, err = p.allocate(ctx, a); err != nil {
				return Observation{}, err
			}
		}
		cur = observation(eip)
	}
	cur.Holders = nil
	if cur.PrivateIP != "" {
		hs, err := p.holders(ctx, t.VPCID, cur.PrivateIP)
		if err != nil {
			return Observation{}, err
		}
		cur.Holders = hs
	}
	return cur, nil
}

// leftBehind are the private IPs kubext assigned for the Elastic IP on an
// ENI it has now left (att is where it is), for GiveBack: the one it was
// associated with before this attach (cur), and the one the IP's status
// recorded (prev) if an earlier attach moved the Elastic IP and was
// interrupted before its status was written. Only for an Elastic IP kubext
// allocated: the private IP of one a user associated is the user's.
func leftBehind(cur Observation, a Address, prev Attachment, att Attachment) []PrivateIP {
	if cur.Owner != a.Name {
		return nil
	}
	var out []PrivateIP
	add := func(eni, ip string) {
		b := PrivateIP{ENI: eni, IP: ip}
		if eni == "" || ip == "" || (eni == att.ENI && ip == att.PrivateIP) || ip == att.PrivateIP || slices.Contains(out, b) {
			// A private IP that moved along with the Elastic IP is not
			// left behind.
			return
		}
		out = append(out, b)
	}
	if isSecondaryIn(cur.Holders, cur.ENI, "") {
		add(cur.ENI, cur.PrivateIP)
	}
	add(prev.ENI, prev.PrivateIP)
	return out
}

// pendingLeft is prev.Pending when this attach did not use it: kubext chose
// it, so it is given back whoever allocated the Elastic IP (GiveBack does
// nothing if it was never assigned).
func pendingLeft(prev Attachment, att Attachment, back []PrivateIP) []PrivateIP {
	if pp := prev.Pending; pp != nil && (pp.ENI != att.ENI || pp.IP != att.PrivateIP) && !slices.Contains(back, *pp) {
		back = append(back, *pp)
	}
	return back
}

// verifyPublic checks that the Elastic IP's association names the target
// ENI and private IP, and that the private IP is on the target ENI only;
// eip is the Elastic IP as just described, nil to describe it. On success
// att.Seen is what it saw.
func (p *Provider) verifyPublic(ctx context.Context, a Address, t NodeTarget, att Attachment, eip *types.Address) (Attachment, error) {
	if eip == nil {
		var err error
		if eip, err = p.findEIP(ctx, a.IP); err != nil {
			return att, err
		}
	}
	if eip == nil {
		return att, errorf(ReasonVerificationFailed, "after associating Elastic IP %s, EC2 DescribeAddresses does not list it", a.IP)
	}
	now := observation(eip)
	if now.ENI != t.ENI || now.PrivateIP != att.PrivateIP {
		return att, errorf(ReasonVerificationFailed, "after associating Elastic IP %s with %s on %s, EC2 DescribeAddresses shows it associated with %q on %q", a.IP, att.PrivateIP, t.ENI, now.PrivateIP, now.ENI)
	}
	hs, err := p.holders(ctx, t.VPCID, att.PrivateIP)
	if err != nil {
		return att, err
	}
	if err := p.ensureOnlyOn(ctx, t, att.PrivateIP, hs); err != nil {
		return att, err
	}
	now.Holders = onlyOn(hs, t.ENI)
	att.Seen = &now
	return att, nil
}

// GiveBack unassigns the private IPs an Elastic IP has left (Attachment's
// GiveBack) from their ENIs, unless the Elastic IP is associated with one
// of them again. It returns those not given back yet, with the error.
func (p *Provider) GiveBack(ctx context.Context, a Address, vpcID string, back []PrivateIP) ([]PrivateIP, error) {
	if len(back) == 0 {
		return nil, nil
	}
	eip, err := p.findEIP(ctx, a.IP)
	if err != nil {
		return back, err
	}
	var cur Observation
	if eip != nil {
		cur = observation(eip)
	}
	for i, b := range back {
		if cur.AssociationID != "" && cur.ENI == b.ENI && cur.PrivateIP == b.IP {
			continue // in use again
		}
		hs, err := p.holders(ctx, vpcID, b.IP)
		if err != nil {
			return back[i:], err
		}
		if !isSecondaryIn(hs, b.ENI, "") {
			continue // gone already
		}
		if _, err := p.ec2.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{
			NetworkInterfaceId: sdkaws.String(b.ENI), PrivateIpAddresses: []string{b.IP},
		}); err != nil {
			return back[i:], ec2Error("UnassignPrivateIpAddresses", fmt.Sprintf("give back %s, a former private IP of Elastic IP %s, from %s", b.IP, a.IP, b.ENI), err)
		}
	}
	return nil, nil
}

// newIPTries bounds how many addresses that look free assignNew tries.
const newIPTries = 8

// assignNew chooses an address of t's subnet that no network interface of
// the VPC lists, has intend record it (att.Pending), and only then asks EC2
// to assign it to t.ENI. It asks without AllowReassignment, so EC2 refuses
// an address that someone took since it looked; then it tries another.
// After EC2's answer it checks that t.ENI alone lists the address (an
// emulator may assign one that another ENI keeps: that ENI keeps it).
//
// EC2 could choose the address itself (SecondaryPrivateIpAddressCount),
// but then a caller killed before recording EC2's answer would leave an
// address on the ENI that nothing names: neither EC2 (private IPs carry no
// tags) nor the next attach could tell it from the ENI's other addresses.
func (p *Provider) assignNew(ctx context.Context, a Address, t NodeTarget, intend Intend, att *Attachment) (string, error) {
	var lastErr error
	for range newIPTries {
		cand, err := randomHost(t.SubnetCIDR)
		if err != nil {
			return "", errorf(ReasonNetworkInterfaceNotFound, "choosing a private IP for Elastic IP %s on %s: subnet %s: %v", a.IP, t.ENI, t.SubnetID, err)
		}
		hs, err := p.holders(ctx, t.VPCID, cand)
		if err != nil {
			return "", err
		}
		if len(hs) > 0 {
			continue
		}
		pip := PrivateIP{ENI: t.ENI, IP: cand}
		if intend != nil {
			if err := intend(ctx, pip); err != nil {
				return "", fmt.Errorf("recording private IP %s for Elastic IP %s before assigning it to %s: %w", cand, a.IP, t.ENI, err)
			}
		}
		att.Pending = &pip
		lastErr = nil
		_, err = p.ec2.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
			NetworkInterfaceId: sdkaws.String(t.ENI), PrivateIpAddresses: []string{cand},
		})
		if err != nil {
			lastErr = ec2Error("AssignPrivateIpAddresses", fmt.Sprintf("assign %s to %s of %s for Elastic IP %s", cand, t.ENI, t.InstanceID, a.IP), err)
		}
		if hs, err = p.holders(ctx, t.VPCID, cand); err != nil {
			return "", err
		}
		mine := heldBy(hs, t.ENI)
		switch {
		case mine && len(hs) == 1:
			// Assigned (also when EC2 answered with an error after
			// assigning it, as a retried request may).
			return cand, nil
		case mine:
			// Another ENI lists it too: it was someone else's first.
			if _, err := p.ec2.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{
				NetworkInterfaceId: sdkaws.String(t.ENI), PrivateIpAddresses: []string{cand},
			}); err != nil {
				return "", ec2Error("UnassignPrivateIpAddresses", fmt.Sprintf("take %s, which %s holds too, off %s", cand, holderList(hs), t.ENI), err)
			}
		case lastErr == nil:
			// EC2 said yes and does not list it there (yet): the next
			// attach finds it through att.Pending.
			return "", errorf(ReasonVerificationFailed, "after assigning %s to %s, EC2 DescribeNetworkInterfaces does not list it there (holders: %s)", cand, t.ENI, holderList(hs))
		case len(hs) == 0:
			// Refused for another reason than the address (a limit, a
			// permission): another address would not do better.
			return "", lastErr
		}
		// Refused because someone took it since: try another.
	}
	if lastErr != nil {
		return "", lastErr
	}
	return "", errorf(ReasonSubnetFull, "no free private IP found in subnet %s (%s) of %s after %d tries, for Elastic IP %s", t.SubnetID, t.SubnetCIDR, t.ENI, newIPTries, a.IP)
}

// randomHost is a random address of an IPv4 subnet that EC2 may assign:
// not the first four nor the last, which EC2 reserves in every subnet.
func randomHost(subnet netip.Prefix) (string, error) {
	if !subnet.IsValid() || !subnet.Addr().Is4() || subnet.Bits() > 28 {
		return "", fmt.Errorf("%q is not an IPv4 subnet of EC2 (/16 to /28)", subnet)
	}
	size := uint32(1) << (32 - subnet.Bits())
	b := subnet.Masked().Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	host := base + 4 + rand.Uint32N(size-5)
	return netip.AddrFrom4([4]byte{byte(host >> 24), byte(host >> 16), byte(host >> 8), byte(host)}).String(), nil
}

func heldBySecondary(ctx context.Context, p *Provider, t NodeTarget, ip string) bool {
	hs, err := p.holders(ctx, t.VPCID, ip)
	return err == nil && len(hs) == 1 && hs[0].ENI == t.ENI && !hs[0].Primary
}

// Detach takes a off every node and keeps what identifies it: in private
// mode it unassigns the address from every ENI of the VPC that lists it as a
// secondary IP; in public mode it disassociates the Elastic IP (when the
// association is kubext's: the Elastic IP is tagged for this IP, or the
// association is the recorded one) and gives back the private IP kubext
// assigned for it (prev.GiveBack included), but keeps the allocation, so
// the next Attach reuses it.
func (p *Provider) Detach(ctx context.Context, a Address, vpcID string, prev Attachment) error {
	_, err := p.detach(ctx, a, vpcID, prev)
	return err
}

// Release is Detach for an IP object that is deleted: it also releases the
// Elastic IP, but only when it carries kubext.io/ip=<name>; an Elastic IP a
// user allocated by hand is never released.
func (p *Provider) Release(ctx context.Context, a Address, vpcID string, prev Attachment) error {
	eip, err := p.detach(ctx, a, vpcID, prev)
	if err != nil || eip == nil || eip.Owner == "" || eip.Owner != a.Name {
		return err
	}
	if _, err := p.ec2.ReleaseAddress(ctx, &ec2.ReleaseAddressInput{AllocationId: sdkaws.String(eip.AllocationID)}); err != nil {
		return ec2Error("ReleaseAddress", fmt.Sprintf("release Elastic IP %s (%s)", a.IP, eip.AllocationID), err)
	}
	return nil
}

// detach returns the Elastic IP as it was found (public mode, nil if none).
func (p *Provider) detach(ctx context.Context, a Address, vpcID string, prev Attachment) (*Observation, error) {
	if !a.public() {
		ip := a.IP.String()
		hs, err := p.holders(ctx, vpcID, ip)
		if err != nil {
			return nil, err
		}
		return nil, p.unassignSecondaries(ctx, hs, ip)
	}
	eip, err := p.findEIP(ctx, a.IP)
	if err != nil {
		return nil, err
	}
	var cur Observation
	if eip != nil {
		cur = observation(eip)
	}
	ours := cur.Owner == a.Name
	if cur.AssociationID != "" && (ours || (cur.ENI == prev.ENI && cur.PrivateIP == prev.PrivateIP)) {
		if _, err := p.ec2.DisassociateAddress(ctx, &ec2.DisassociateAddressInput{AssociationId: sdkaws.String(cur.AssociationID)}); err != nil {
			return nil, ec2Error("DisassociateAddress", fmt.Sprintf("disassociate Elastic IP %s (%s)", a.IP, cur.AssociationID), err)
		}
	}
	// The private IPs kubext assigned for the Elastic IP: the recorded one,
	// and the one the association names when the association was kubext's
	// (the same on EC2; not under a double or emulator that associates
	// elsewhere).
	privs := []string{}
	if prev.PrivateIP != "" {
		privs = append(privs, prev.PrivateIP)
	}
	if cur.PrivateIP != "" && ours && cur.PrivateIP != prev.PrivateIP {
		privs = append(privs, cur.PrivateIP)
	}
	for _, priv := range privs {
		hs, err := p.holders(ctx, vpcID, priv)
		if err != nil {
			return nil, err
		}
		if err := p.unassignSecondaries(ctx, hs, priv); err != nil {
			return nil, err
		}
	}
	back := prev.GiveBack
	if prev.Pending != nil && !slices.Contains(back, *prev.Pending) {
		back = append(slices.Clone(back), *prev.Pending)
	}
	if _, err := p.GiveBack(ctx, a, vpcID, back); err != nil {
		return nil, err
	}
	if eip == nil {
		return nil, nil
	}
	return &cur, nil
}

func (p *Provider) unassignSecondaries(ctx context.Context, hs []Holder, ip string) error {
	for _, h := range hs {
		if h.Primary {
			continue
		}
		if _, err := p.ec2.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{
			NetworkInterfaceId: sdkaws.String(h.ENI), PrivateIpAddresses: []string{ip},
		}); err != nil {
			return ec2Error("UnassignPrivateIpAddresses", fmt.Sprintf("remove %s from %s", ip, h.ENI), err)
		}
	}
	return nil
}

func (p *Provider) allocate(ctx context.Context, a Address) (*types.Address, error) {
	out, err := p.ec2.AllocateAddress(ctx, &ec2.AllocateAddressInput{
		Domain:         types.DomainTypeVpc,
		Address:        sdkaws.String(a.IP.String()),
		PublicIpv4Pool: sdkaws.String(a.PublicIPv4Pool),
		TagSpecifications: []types.TagSpecification{{
			ResourceType: types.ResourceTypeElasticIp,
			Tags:         []types.Tag{{Key: sdkaws.String(TagKey), Value: sdkaws.String(a.Name)}},
		}},
	})
	if err != nil {
		return nil, ec2Error("AllocateAddress", fmt.Sprintf("allocate Elastic IP %s from pool %s", a.IP, a.PublicIPv4Pool), err)
	}
	if got := sdkaws.ToString(out.PublicIp); got != a.IP.String() {
		return nil, errorf(ReasonVerificationFailed, "EC2 AllocateAddress for %s from pool %s handed out %s (%s) instead", a.IP, a.PublicIPv4Pool, got, sdkaws.ToString(out.AllocationId))
	}
	return &types.Address{AllocationId: out.AllocationId, PublicIp: out.PublicIp,
		Tags: []types.Tag{{Key: sdkaws.String(TagKey), Value: sdkaws.String(a.Name)}}}, nil
}

// findEIP returns the Elastic IP with public address ip, or nil. It filters
// rather than naming the address, because naming an unknown one is an error.
func (p *Provider) findEIP(ctx context.Context, ip netip.Addr) (*types.Address, error) {
	out, err := p.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{
		Filters: []types.Filter{{Name: sdkaws.String("public-ip"), Values: []string{ip.String()}}},
	})
	if err != nil {
		return nil, ec2Error("DescribeAddresses", "look up Elastic IP "+ip.String(), err)
	}
	for i := range out.Addresses {
		if sdkaws.ToString(out.Addresses[i].PublicIp) == ip.String() {
			return &out.Addresses[i], nil
		}
	}
	return nil, nil
}

// holders lists the ENIs of the VPC whose private IPs include ip. It
// filters by VPC only and matches the address itself, page by page.
func (p *Provider) holders(ctx context.Context, vpcID, ip string) ([]Holder, error) {
	if vpcID == "" {
		return nil, errorf(ReasonNetworkInterfaceNotFound, "no VPC given to look for %s in", ip)
	}
	in := &ec2.DescribeNetworkInterfacesInput{Filters: []types.Filter{{Name: sdkaws.String("vpc-id"), Values: []string{vpcID}}}}
	var hs []Holder
	for {
		out, err := p.ec2.DescribeNetworkInterfaces(ctx, in)
		if err != nil {
			return nil, ec2Error("DescribeNetworkInterfaces", fmt.Sprintf("list network interfaces of %s holding %s", vpcID, ip), err)
		}
		for _, n := range out.NetworkInterfaces {
			for _, pip := range n.PrivateIpAddresses {
				if sdkaws.ToString(pip.PrivateIpAddress) != ip {
					continue
				}
				h := Holder{ENI: sdkaws.ToString(n.NetworkInterfaceId), SubnetID: sdkaws.ToString(n.SubnetId), Primary: sdkaws.ToBool(pip.Primary)}
				if n.Attachment != nil {
					h.InstanceID = sdkaws.ToString(n.Attachment.InstanceId)
				}
				hs = append(hs, h)
			}
		}
		if sdkaws.ToString(out.NextToken) == "" {
			return hs, nil
		}
		in.NextToken = out.NextToken
	}
}

func heldBy(hs []Holder, eni string) bool {
	for _, h := range hs {
		if h.ENI == eni {
			return true
		}
	}
	return false
}

// isSecondaryIn reports whether eni holds the address as a secondary IP, in
// subnet (any subnet when empty).
func isSecondaryIn(hs []Holder, eni, subnet string) bool {
	for _, h := range hs {
		if h.ENI == eni && !h.Primary && (subnet == "" || h.SubnetID == subnet) {
			return true
		}
	}
	return false
}

func refusePrimaryElsewhere(hs []Holder, eni, ip string) error {
	for _, h := range hs {
		if h.Primary && h.ENI != eni {
			return errorf(ReasonAddressInUse, "%s is the primary private IP of %s (instance %s); a primary address cannot be moved, so it cannot be a static IP", ip, h.ENI, h.InstanceID)
		}
	}
	return nil
}

func holderList(hs []Holder) string {
	if len(hs) == 0 {
		return "none"
	}
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = h.ENI
	}
	return strings.Join(s, ", ")
}
