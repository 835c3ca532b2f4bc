// Package ec2double is an in-memory EC2 for tests of the aws provider. It
// implements, with the SDK's own input and output types, the EC2 semantics
// the provider depends on:
//
//   - a private IP is on at most one ENI of a VPC: assigning one that another
//     ENI holds fails with InvalidIPAddress.InUse unless AllowReassignment,
//     which moves it (it is removed from the old ENI, and an Elastic IP
//     associated with it moves along, as EC2 documents); a primary IP never
//     moves;
//   - an ENI holds at most its instance type's number of private IPs
//     (PrivateIpAddressLimitExceeded);
//   - an address must lie in the ENI's subnet;
//   - an Elastic IP is allocated from a BYOIP pool only with an address of
//     that pool, at most the account quota of them (AddressLimitExceeded);
//     it is associated with the private IP asked for, which must be on the
//     ENI; an associated Elastic IP needs AllowReassociation to move
//     (Resource.AlreadyAssociated) and cannot be released
//     (InvalidIPAddress.InUse);
//   - unknown instances, ENIs, subnets, allocations and associations are the
//     matching *.NotFound errors; unknown filter names are refused.
//
// Where it is stricter or looser than EC2 is said at each method. Error
// codes are EC2's documented ones; the exact code EC2 returns for an
// address held elsewhere is not documented per action (EC2 answers
// InvalidIPAddress.InUse or InvalidParameterValue "... is in use"); the
// provider maps both to the same reason.
//
// Each call is counted (Calls, Mutating); Fail injects errors for the next
// calls of an action (throttling is Fail with RequestLimitExceeded);
// Latency delays every call.
package ec2double

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
)

// MutatingActions are the actions that change EC2's state.
var MutatingActions = []string{"AssignPrivateIpAddresses", "UnassignPrivateIpAddresses", "AllocateAddress", "AssociateAddress", "DisassociateAddress", "ReleaseAddress"}

type subnet struct {
	id, vpc string
	cidr    netip.Prefix
}

type privateIP struct {
	addr    string
	primary bool
}

type eni struct {
	id, subnet, vpc, instance string
	deviceIndex               int32
	ips                       []privateIP
	limit                     int
	tags                      map[string]string
}

type eip struct {
	alloc, public, pool string
	tags                map[string]string
	assoc, eni, priv    string
}

// Double is an in-memory EC2. Its zero value is not usable; use New.
type Double struct {
	mu        sync.Mutex
	subnets   map[string]*subnet
	enis      map[string]*eni
	instances map[string][]string // instance → ENI IDs by device index
	eips      map[string]*eip     // by allocation ID
	pools     map[string][]netip.Prefix
	next      int
	calls     map[string]int
	faults    map[string][]error
	onCall    map[string]func()
	// started are the calls in the order they started, for CallsBetween
	// and CallLog.
	started []Call
	// changed is signalled after every mutating call (Changes).
	changed chan struct{}

	// EIPQuota is the number of Elastic IPs the account may hold (default 5,
	// EC2's default per region).
	EIPQuota int
	// IPLimit is the number of private IPv4 addresses per ENI (default 15,
	// an m5.xlarge's); SetIPLimit overrides it for one ENI.
	IPLimit int
	// PageSize, when > 0, splits DescribeNetworkInterfaces answers into
	// pages of that many ENIs, so that callers must follow NextToken.
	PageSize int
	// Latency delays every call (honouring the context).
	Latency time.Duration
}

// New returns an empty EC2.
func New() *Double {
	return &Double{subnets: map[string]*subnet{}, enis: map[string]*eni{}, instances: map[string][]string{},
		eips: map[string]*eip{}, pools: map[string][]netip.Prefix{}, calls: map[string]int{}, faults: map[string][]error{},
		changed: make(chan struct{}, 1), EIPQuota: 5, IPLimit: 15}
}

// Call is one call as the double saw it.
type Call struct {
	Action string
	Start  time.Time
}

// Changes is signalled after a mutating call returns (at most one signal
// is pending), so that a model of the network can follow EC2 at once.
func (d *Double) Changes() <-chan struct{} { return d.changed }

func (d *Double) notify() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// APIError is an error as the SDK reports one EC2 returned.
func APIError(code, format string, args ...any) error {
	return &smithy.GenericAPIError{Code: code, Message: fmt.Sprintf(format, args...), Fault: smithy.FaultClient}
}

func (d *Double) id(prefix string) string {
	d.next++
	return fmt.Sprintf("%s-%017x", prefix, d.next)
}

// AddSubnet adds a subnet of vpc with the given CIDR and returns its ID.
func (d *Double) AddSubnet(vpc, cidr string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := &subnet{id: d.id("subnet"), vpc: vpc, cidr: netip.MustParsePrefix(cidr)}
	d.subnets[s.id] = s
	return s.id
}

// AddInstance adds an instance with one ENI in each subnet (device index 0,
// 1, ...), each with a free address of its subnet as primary IP, and
// returns the instance ID and the ENI IDs.
func (d *Double) AddInstance(subnets ...string) (string, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	inst := d.id("i")
	var ids []string
	for i, sid := range subnets {
		s := d.subnets[sid]
		e := &eni{id: d.id("eni"), subnet: sid, vpc: s.vpc, instance: inst, deviceIndex: int32(i)}
		e.ips = []privateIP{{addr: d.freeIP(s), primary: true}}
		d.enis[e.id] = e
		ids = append(ids, e.id)
	}
	d.instances[inst] = ids
	return inst, ids
}

// AddInstanceAt adds an instance with one ENI in subnetID whose primary IP
// is primary (a lab node's own address), and returns the instance ID and
// the ENI ID.
func (d *Double) AddInstanceAt(subnetID, primary string) (string, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	inst := d.id("i")
	s := d.subnets[subnetID]
	e := &eni{id: d.id("eni"), subnet: subnetID, vpc: s.vpc, instance: inst, ips: []privateIP{{addr: primary, primary: true}}}
	d.enis[e.id] = e
	d.instances[inst] = []string{e.id}
	return inst, e.id
}

// AddENI adds an unattached ENI in a subnet (e.g. another workload's), with
// primary IP primary (a free one when empty).
func (d *Double) AddENI(subnetID, primary string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.subnets[subnetID]
	if primary == "" {
		primary = d.freeIP(s)
	}
	e := &eni{id: d.id("eni"), subnet: subnetID, vpc: s.vpc, ips: []privateIP{{addr: primary, primary: true}}}
	d.enis[e.id] = e
	return e.id
}

// AttachENI adds an ENI in a subnet to an instance at the next device
// index, with the given tags, and returns its ID.
func (d *Double) AttachENI(instance, subnetID string, tags map[string]string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.subnets[subnetID]
	e := &eni{id: d.id("eni"), subnet: subnetID, vpc: s.vpc, instance: instance, deviceIndex: int32(len(d.instances[instance])), tags: tags}
	e.ips = []privateIP{{addr: d.freeIP(s), primary: true}}
	d.enis[e.id] = e
	d.instances[instance] = append(d.instances[instance], e.id)
	return e.id
}

// SetIPLimit sets the number of private IPv4 addresses eni may hold.
func (d *Double) SetIPLimit(eniID string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.enis[eniID].limit = n
}

// AddPool adds a BYOIP public IPv4 pool with the given ranges.
func (d *Double) AddPool(pool string, cidrs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range cidrs {
		d.pools[pool] = append(d.pools[pool], netip.MustParsePrefix(c))
	}
}

// AddEIP adds an Elastic IP as a user would allocate it by hand (with the
// given tags, none for an untagged one) and returns its allocation ID.
func (d *Double) AddEIP(public, pool string, tags map[string]string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := &eip{alloc: d.id("eipalloc"), public: public, pool: pool, tags: tags}
	d.eips[e.alloc] = e
	return e.alloc
}

// Fail makes the next calls of action fail with errs, one error a call.
func (d *Double) Fail(action string, errs ...error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults[action] = append(d.faults[action], errs...)
}

// OnCall runs f at the start of every call of action, before the call does
// anything (nil removes it): for tests that look at what others see at
// the moment a caller asks EC2 for something.
func (d *Double) OnCall(action string, f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.onCall == nil {
		d.onCall = map[string]func(){}
	}
	d.onCall[action] = f
}

// Calls returns how many times action was called, failed calls included.
func (d *Double) Calls(action string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[action]
}

// maxStarted bounds the call start times kept.
const maxStarted = 1 << 16

// CallsBetween returns how many calls started at or after from and, with
// Latency, returned by to: the calls a caller waited for in that window.
func (d *Double) CallsBetween(from, to time.Time) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.started {
		if !c.Start.Before(from) && !c.Start.Add(d.Latency).After(to) {
			n++
		}
	}
	return n
}

// CallLog returns the calls CallsBetween counts, in the order they
// started; each returned Latency after its start.
func (d *Double) CallLog(from, to time.Time) []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Call
	for _, c := range d.started {
		if !c.Start.Before(from) && !c.Start.Add(d.Latency).After(to) {
			out = append(out, c)
		}
	}
	return out
}

// TotalCalls returns how many calls were made, of every action, failed
// ones included.
func (d *Double) TotalCalls() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.calls {
		n += c
	}
	return n
}

// Mutating returns how many mutating calls were made, failed ones included.
func (d *Double) Mutating() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, a := range MutatingActions {
		n += d.calls[a]
	}
	return n
}

// ResetCalls sets every call count to zero.
func (d *Double) ResetCalls() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = map[string]int{}
}

// SetLatency changes Latency while calls are being served.
func (d *Double) SetLatency(l time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.Latency = l
}

// Holders returns the ENIs that hold private address ip, sorted.
func (d *Double) Holders(ip string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, e := range d.enis {
		if e.has(ip) >= 0 {
			out = append(out, e.id)
		}
	}
	sort.Strings(out)
	return out
}

// PrivateIPs returns the private addresses of an ENI, primary first.
func (d *Double) PrivateIPs(eniID string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, p := range d.enis[eniID].ips {
		out = append(out, p.addr)
	}
	return out
}

// EIP returns the Elastic IP with public address ip: allocation ID, ENI and
// private IP of its association, and whether it exists.
func (d *Double) EIP(public string) (alloc, eniID, priv string, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.eipByPublic(public); e != nil {
		return e.alloc, e.eni, e.priv, true
	}
	return "", "", "", false
}

// Associations returns the private IP each associated Elastic IP is
// associated with, by public address.
func (d *Double) Associations() map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]string{}
	for _, e := range d.eips {
		if e.assoc != "" {
			out[e.public] = e.priv
		}
	}
	return out
}

// begin counts a call, waits Latency and returns an injected error, if any;
// when it returns nil, d.mu is held for the call.
func (d *Double) begin(ctx context.Context, action string) error {
	d.mu.Lock()
	d.calls[action]++
	if len(d.started) < maxStarted {
		d.started = append(d.started, Call{Action: action, Start: time.Now()})
	}
	var err error
	if q := d.faults[action]; len(q) > 0 {
		err, d.faults[action] = q[0], q[1:]
	}
	lat, hook := d.Latency, d.onCall[action]
	d.mu.Unlock()
	if hook != nil {
		hook()
	}
	if lat > 0 {
		select {
		case <-time.After(lat):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err == nil {
		d.mu.Lock()
	}
	return err
}

func (e *eni) has(ip string) int {
	for i, p := range e.ips {
		if p.addr == ip {
			return i
		}
	}
	return -1
}

func (d *Double) eipByPublic(public string) *eip {
	for _, e := range d.eips {
		if e.public == public {
			return e
		}
	}
	return nil
}

func (d *Double) eipByPrivate(eniID, priv string) *eip {
	for _, e := range d.eips {
		if e.eni == eniID && e.priv == priv {
			return e
		}
	}
	return nil
}

// freeIP returns an address of s that no ENI holds, skipping the first four
// and the last, which EC2 reserves in every subnet.
func (d *Double) freeIP(s *subnet) string {
	a := s.cidr.Masked().Addr()
	for i := 0; i < 4; i++ {
		a = a.Next()
	}
	for ; s.cidr.Contains(a.Next()); a = a.Next() {
		used := false
		for _, e := range d.enis {
			if e.vpc == s.vpc && e.has(a.String()) >= 0 {
				used = true
			}
		}
		if !used {
			return a.String()
		}
	}
	return ""
}

func (d *Double) limit(e *eni) int {
	if e.limit > 0 {
		return e.limit
	}
	return d.IPLimit
}

func (d *Double) getEIP(alloc string) (*eip, error) {
	if x, ok := d.eips[alloc]; ok {
		return x, nil
	}
	return nil, APIError("InvalidAllocationID.NotFound", "The allocation ID '%s' does not exist", alloc)
}

func (d *Double) getENI(id string) (*eni, error) {
	if e, ok := d.enis[id]; ok {
		return e, nil
	}
	return nil, APIError("InvalidNetworkInterfaceID.NotFound", "The networkInterface ID '%s' does not exist", id)
}

// AssignPrivateIpAddresses assigns explicit addresses or a count of free
// ones. Looser than EC2: it does not check the caller's ownership of the
// ENI. Like EC2, it fails the whole request when any address cannot be
// assigned, and reassignment carries an associated Elastic IP along.
func (d *Double) AssignPrivateIpAddresses(ctx context.Context, in *ec2.AssignPrivateIpAddressesInput, _ ...func(*ec2.Options)) (*ec2.AssignPrivateIpAddressesOutput, error) { //nolint:revive // the SDK names it so
	defer d.notify()
	if err := d.begin(ctx, "AssignPrivateIpAddresses"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	e, err := d.getENI(sdkaws.ToString(in.NetworkInterfaceId))
	if err != nil {
		return nil, err
	}
	s := d.subnets[e.subnet]
	count := int(sdkaws.ToInt32(in.SecondaryPrivateIpAddressCount))
	if (count > 0) == (len(in.PrivateIpAddresses) > 0) {
		return nil, APIError("InvalidParameterCombination", "Specify either PrivateIpAddresses or SecondaryPrivateIpAddressCount")
	}
	var want []string
	for _, ip := range in.PrivateIpAddresses {
		a, err := netip.ParseAddr(ip)
		if err != nil || !s.cidr.Contains(a) {
			return nil, APIError("InvalidParameterValue", "Address %s does not fall within the subnet's address range", ip)
		}
		if e.has(ip) >= 0 {
			continue // EC2 accepts an address the ENI already holds
		}
		for _, other := range d.enis {
			if other.vpc != e.vpc || other.id == e.id {
				continue
			}
			if i := other.has(ip); i >= 0 && (other.ips[i].primary || !sdkaws.ToBool(in.AllowReassignment)) {
				return nil, APIError("InvalidIPAddress.InUse", "Address %s is in use", ip)
			}
		}
		want = append(want, ip)
	}
	if count > 0 {
		if len(e.ips)+count > d.limit(e) {
			return nil, APIError("PrivateIpAddressLimitExceeded", "Number of private addresses will exceed limit.")
		}
		for i := 0; i < count; i++ {
			ip := d.freeIP(s)
			if ip == "" {
				return nil, APIError("InsufficientFreeAddressesInSubnet", "The specified subnet does not have enough free addresses to satisfy the request.")
			}
			e.ips = append(e.ips, privateIP{addr: ip})
			want = append(want, ip)
		}
		return d.assigned(e, want), nil
	}
	if len(e.ips)+len(want) > d.limit(e) {
		return nil, APIError("PrivateIpAddressLimitExceeded", "Number of private addresses will exceed limit.")
	}
	for _, ip := range want {
		for _, other := range d.enis {
			if i := other.has(ip); i >= 0 && other.vpc == e.vpc {
				other.ips = append(other.ips[:i], other.ips[i+1:]...)
				if x := d.eipByPrivate(other.id, ip); x != nil {
					x.eni = e.id
				}
			}
		}
		e.ips = append(e.ips, privateIP{addr: ip})
	}
	return d.assigned(e, want), nil
}

func (d *Double) assigned(e *eni, ips []string) *ec2.AssignPrivateIpAddressesOutput {
	out := &ec2.AssignPrivateIpAddressesOutput{NetworkInterfaceId: sdkaws.String(e.id)}
	for _, ip := range ips {
		out.AssignedPrivateIpAddresses = append(out.AssignedPrivateIpAddresses, types.AssignedPrivateIpAddress{PrivateIpAddress: sdkaws.String(ip)})
	}
	return out
}

// UnassignPrivateIpAddresses removes secondary addresses; an Elastic IP
// associated with one is disassociated, as on EC2. Stricter than EC2 might
// be: any address the ENI does not hold as a secondary fails the request.
func (d *Double) UnassignPrivateIpAddresses(ctx context.Context, in *ec2.UnassignPrivateIpAddressesInput, _ ...func(*ec2.Options)) (*ec2.UnassignPrivateIpAddressesOutput, error) { //nolint:revive // the SDK names it so
	defer d.notify()
	if err := d.begin(ctx, "UnassignPrivateIpAddresses"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	e, err := d.getENI(sdkaws.ToString(in.NetworkInterfaceId))
	if err != nil {
		return nil, err
	}
	for _, ip := range in.PrivateIpAddresses {
		if i := e.has(ip); i < 0 || e.ips[i].primary {
			return nil, APIError("InvalidParameterValue", "Some of the specified addresses are not assigned to interface %s", e.id)
		}
	}
	for _, ip := range in.PrivateIpAddresses {
		i := e.has(ip)
		e.ips = append(e.ips[:i], e.ips[i+1:]...)
		if x := d.eipByPrivate(e.id, ip); x != nil {
			x.assoc, x.eni, x.priv = "", "", ""
		}
	}
	return &ec2.UnassignPrivateIpAddressesOutput{}, nil
}

// AllocateAddress allocates an Elastic IP. Stricter than EC2: an address
// needs a pool (EC2 also allows Address alone to recover a released
// Amazon-owned address), and without a pool it hands out from 198.51.100.0/24.
func (d *Double) AllocateAddress(ctx context.Context, in *ec2.AllocateAddressInput, _ ...func(*ec2.Options)) (*ec2.AllocateAddressOutput, error) {
	defer d.notify()
	if err := d.begin(ctx, "AllocateAddress"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	if len(d.eips) >= d.EIPQuota {
		return nil, APIError("AddressLimitExceeded", "The maximum number of addresses has been reached.")
	}
	pool, addr := sdkaws.ToString(in.PublicIpv4Pool), sdkaws.ToString(in.Address)
	if addr != "" {
		ranges, ok := d.pools[pool]
		if !ok {
			return nil, APIError("InvalidPublicIpv4PoolID.NotFound", "The public IPv4 pool ID '%s' does not exist", pool)
		}
		a, err := netip.ParseAddr(addr)
		in := false
		for _, r := range ranges {
			in = in || (err == nil && r.Contains(a))
		}
		if !in {
			return nil, APIError("InvalidParameterValue", "Address %s is not in pool %s", addr, pool)
		}
		if d.eipByPublic(addr) != nil {
			return nil, APIError("InvalidIPAddress.InUse", "Address %s is already allocated", addr)
		}
	} else {
		addr = fmt.Sprintf("198.51.100.%d", len(d.eips)+1)
	}
	e := &eip{alloc: d.id("eipalloc"), public: addr, pool: pool, tags: map[string]string{}}
	for _, ts := range in.TagSpecifications {
		if ts.ResourceType != types.ResourceTypeElasticIp {
			return nil, APIError("InvalidParameterValue", "'%s' is not a valid taggable resource type for this operation.", ts.ResourceType)
		}
		for _, t := range ts.Tags {
			e.tags[sdkaws.ToString(t.Key)] = sdkaws.ToString(t.Value)
		}
	}
	d.eips[e.alloc] = e
	return &ec2.AllocateAddressOutput{AllocationId: sdkaws.String(e.alloc), PublicIp: sdkaws.String(addr),
		PublicIpv4Pool: sdkaws.String(pool), Domain: types.DomainTypeVpc}, nil
}

// AssociateAddress associates an Elastic IP with a private IP of an ENI
// (its primary when none is given). Looser than EC2: InstanceId and PublicIp
// (EC2-Classic style) are not supported and refused.
func (d *Double) AssociateAddress(ctx context.Context, in *ec2.AssociateAddressInput, _ ...func(*ec2.Options)) (*ec2.AssociateAddressOutput, error) {
	defer d.notify()
	if err := d.begin(ctx, "AssociateAddress"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	x, err := d.getEIP(sdkaws.ToString(in.AllocationId))
	if err != nil {
		return nil, err
	}
	e, err := d.getENI(sdkaws.ToString(in.NetworkInterfaceId))
	if err != nil {
		return nil, err
	}
	priv := sdkaws.ToString(in.PrivateIpAddress)
	if priv == "" {
		priv = e.ips[0].addr
	}
	if e.has(priv) < 0 {
		return nil, APIError("InvalidParameterValue", "The specified private IP address %s is not assigned to interface %s", priv, e.id)
	}
	reassoc := sdkaws.ToBool(in.AllowReassociation)
	if x.assoc != "" && (x.eni != e.id || x.priv != priv) && !reassoc {
		return nil, APIError("Resource.AlreadyAssociated", "resource %s is already associated with associate-id %s", x.alloc, x.assoc)
	}
	if other := d.eipByPrivate(e.id, priv); other != nil && other != x {
		if !reassoc {
			return nil, APIError("Resource.AlreadyAssociated", "private IP %s already has Elastic IP %s", priv, other.public)
		}
		other.assoc, other.eni, other.priv = "", "", ""
	}
	x.assoc, x.eni, x.priv = d.id("eipassoc"), e.id, priv
	return &ec2.AssociateAddressOutput{AssociationId: sdkaws.String(x.assoc)}, nil
}

// DisassociateAddress removes an association by its ID.
func (d *Double) DisassociateAddress(ctx context.Context, in *ec2.DisassociateAddressInput, _ ...func(*ec2.Options)) (*ec2.DisassociateAddressOutput, error) {
	defer d.notify()
	if err := d.begin(ctx, "DisassociateAddress"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	for _, x := range d.eips {
		if x.assoc != "" && x.assoc == sdkaws.ToString(in.AssociationId) {
			x.assoc, x.eni, x.priv = "", "", ""
			return &ec2.DisassociateAddressOutput{}, nil
		}
	}
	return nil, APIError("InvalidAssociationID.NotFound", "The association ID '%s' does not exist", sdkaws.ToString(in.AssociationId))
}

// ReleaseAddress releases an Elastic IP that is not associated.
func (d *Double) ReleaseAddress(ctx context.Context, in *ec2.ReleaseAddressInput, _ ...func(*ec2.Options)) (*ec2.ReleaseAddressOutput, error) {
	defer d.notify()
	if err := d.begin(ctx, "ReleaseAddress"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	x, err := d.getEIP(sdkaws.ToString(in.AllocationId))
	if err != nil {
		return nil, err
	}
	if x.assoc != "" {
		return nil, APIError("InvalidIPAddress.InUse", "Address %s is in use (associated with %s)", x.public, x.assoc)
	}
	delete(d.eips, x.alloc)
	return &ec2.ReleaseAddressOutput{}, nil
}

// DescribeAddresses supports AllocationIds, PublicIps and the filters
// public-ip, allocation-id and tag:<key>; other filters are refused
// (EC2 knows more).
func (d *Double) DescribeAddresses(ctx context.Context, in *ec2.DescribeAddressesInput, _ ...func(*ec2.Options)) (*ec2.DescribeAddressesOutput, error) {
	if err := d.begin(ctx, "DescribeAddresses"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	out := &ec2.DescribeAddressesOutput{}
	for _, ip := range in.PublicIps {
		if d.eipByPublic(ip) == nil {
			return nil, APIError("InvalidAddress.NotFound", "Address '%s' not found.", ip)
		}
	}
	for _, id := range in.AllocationIds {
		if _, err := d.getEIP(id); err != nil {
			return nil, err
		}
	}
	ids := make([]string, 0, len(d.eips))
	for id := range d.eips {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		x := d.eips[id]
		if len(in.PublicIps) > 0 && !contains(in.PublicIps, x.public) || len(in.AllocationIds) > 0 && !contains(in.AllocationIds, x.alloc) {
			continue
		}
		ok := true
		for _, f := range in.Filters {
			name := sdkaws.ToString(f.Name)
			switch {
			case name == "public-ip":
				ok = ok && contains(f.Values, x.public)
			case name == "allocation-id":
				ok = ok && contains(f.Values, x.alloc)
			case strings.HasPrefix(name, "tag:"):
				v, has := x.tags[strings.TrimPrefix(name, "tag:")]
				ok = ok && has && contains(f.Values, v)
			default:
				return nil, APIError("InvalidParameterValue", "The filter '%s' is invalid", name)
			}
		}
		if !ok {
			continue
		}
		a := types.Address{AllocationId: sdkaws.String(x.alloc), PublicIp: sdkaws.String(x.public), Domain: types.DomainTypeVpc}
		if x.pool != "" {
			a.PublicIpv4Pool = sdkaws.String(x.pool)
		}
		if x.assoc != "" {
			a.AssociationId, a.NetworkInterfaceId, a.PrivateIpAddress = sdkaws.String(x.assoc), sdkaws.String(x.eni), sdkaws.String(x.priv)
			if e := d.enis[x.eni]; e != nil && e.instance != "" {
				a.InstanceId = sdkaws.String(e.instance)
			}
		}
		for k, v := range x.tags {
			a.Tags = append(a.Tags, types.Tag{Key: sdkaws.String(k), Value: sdkaws.String(v)})
		}
		out.Addresses = append(out.Addresses, a)
	}
	return out, nil
}

// DescribeNetworkInterfaces supports NetworkInterfaceIds and the filters
// vpc-id, subnet-id, network-interface-id and addresses.private-ip-address
// (any private IP of the ENI, primary or secondary, as on EC2), with
// NextToken paging when PageSize is set.
func (d *Double) DescribeNetworkInterfaces(ctx context.Context, in *ec2.DescribeNetworkInterfacesInput, _ ...func(*ec2.Options)) (*ec2.DescribeNetworkInterfacesOutput, error) {
	if err := d.begin(ctx, "DescribeNetworkInterfaces"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	for _, id := range in.NetworkInterfaceIds {
		if _, err := d.getENI(id); err != nil {
			return nil, err
		}
	}
	ids := make([]string, 0, len(d.enis))
	for id := range d.enis {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var match []types.NetworkInterface
	for _, id := range ids {
		e := d.enis[id]
		if len(in.NetworkInterfaceIds) > 0 && !contains(in.NetworkInterfaceIds, id) {
			continue
		}
		ok := true
		for _, f := range in.Filters {
			switch name := sdkaws.ToString(f.Name); name {
			case "vpc-id":
				ok = ok && contains(f.Values, e.vpc)
			case "subnet-id":
				ok = ok && contains(f.Values, e.subnet)
			case "network-interface-id":
				ok = ok && contains(f.Values, e.id)
			case "addresses.private-ip-address":
				found := false
				for _, p := range e.ips {
					found = found || contains(f.Values, p.addr)
				}
				ok = ok && found
			default:
				return nil, APIError("InvalidParameterValue", "The filter '%s' is invalid", name)
			}
		}
		if ok {
			match = append(match, d.describeENI(e))
		}
	}
	start := 0
	if t := sdkaws.ToString(in.NextToken); t != "" {
		if _, err := fmt.Sscanf(t, "page-%d", &start); err != nil {
			return nil, APIError("InvalidParameterValue", "invalid NextToken %q", t)
		}
	}
	out := &ec2.DescribeNetworkInterfacesOutput{}
	end := len(match)
	if d.PageSize > 0 && start+d.PageSize < end {
		end = start + d.PageSize
		out.NextToken = sdkaws.String(fmt.Sprintf("page-%d", end))
	}
	if start < len(match) {
		out.NetworkInterfaces = match[start:end]
	}
	return out, nil
}

func (d *Double) describeENI(e *eni) types.NetworkInterface {
	n := types.NetworkInterface{NetworkInterfaceId: sdkaws.String(e.id), SubnetId: sdkaws.String(e.subnet), VpcId: sdkaws.String(e.vpc),
		PrivateIpAddress: sdkaws.String(e.ips[0].addr)}
	for k, v := range e.tags {
		n.TagSet = append(n.TagSet, types.Tag{Key: sdkaws.String(k), Value: sdkaws.String(v)})
	}
	if e.instance != "" {
		n.Attachment = &types.NetworkInterfaceAttachment{InstanceId: sdkaws.String(e.instance), DeviceIndex: sdkaws.Int32(e.deviceIndex)}
	}
	for _, p := range e.ips {
		ip := types.NetworkInterfacePrivateIpAddress{PrivateIpAddress: sdkaws.String(p.addr), Primary: sdkaws.Bool(p.primary)}
		if x := d.eipByPrivate(e.id, p.addr); x != nil {
			ip.Association = &types.NetworkInterfaceAssociation{PublicIp: sdkaws.String(x.public), AllocationId: sdkaws.String(x.alloc), AssociationId: sdkaws.String(x.assoc)}
		}
		n.PrivateIpAddresses = append(n.PrivateIpAddresses, ip)
	}
	return n
}

// DescribeInstances supports InstanceIds only; an unknown ID fails the call
// with InvalidInstanceID.NotFound, as on EC2.
func (d *Double) DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	if err := d.begin(ctx, "DescribeInstances"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	if len(in.Filters) > 0 {
		return nil, APIError("InvalidParameterValue", "the double supports InstanceIds only")
	}
	res := types.Reservation{}
	for _, id := range in.InstanceIds {
		enis, ok := d.instances[id]
		if !ok {
			return nil, APIError("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", id)
		}
		inst := types.Instance{InstanceId: sdkaws.String(id)}
		for _, eid := range enis {
			e := d.enis[eid]
			n := types.InstanceNetworkInterface{NetworkInterfaceId: sdkaws.String(e.id), SubnetId: sdkaws.String(e.subnet), VpcId: sdkaws.String(e.vpc),
				Attachment: &types.InstanceNetworkInterfaceAttachment{DeviceIndex: sdkaws.Int32(e.deviceIndex)}, PrivateIpAddress: sdkaws.String(e.ips[0].addr)}
			for _, p := range e.ips {
				n.PrivateIpAddresses = append(n.PrivateIpAddresses, types.InstancePrivateIpAddress{PrivateIpAddress: sdkaws.String(p.addr), Primary: sdkaws.Bool(p.primary)})
			}
			inst.NetworkInterfaces = append(inst.NetworkInterfaces, n)
			if e.deviceIndex == 0 {
				inst.VpcId, inst.SubnetId, inst.PrivateIpAddress = sdkaws.String(e.vpc), sdkaws.String(e.subnet), sdkaws.String(e.ips[0].addr)
			}
		}
		res.Instances = append(res.Instances, inst)
	}
	return &ec2.DescribeInstancesOutput{Reservations: []types.Reservation{res}}, nil
}

// DescribeSubnets supports SubnetIds only.
func (d *Double) DescribeSubnets(ctx context.Context, in *ec2.DescribeSubnetsInput, _ ...func(*ec2.Options)) (*ec2.DescribeSubnetsOutput, error) {
	if err := d.begin(ctx, "DescribeSubnets"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	out := &ec2.DescribeSubnetsOutput{}
	for _, id := range in.SubnetIds {
		s, ok := d.subnets[id]
		if !ok {
			return nil, APIError("InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", id)
		}
		out.Subnets = append(out.Subnets, types.Subnet{SubnetId: sdkaws.String(s.id), VpcId: sdkaws.String(s.vpc), CidrBlock: sdkaws.String(s.cidr.String())})
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Leak adds ip to an ENI as a secondary address without any check, leaving
// it wherever else it is: the state a lenient EC2 (moto) leaves behind
// after a reassignment. For tests of the provider's verification.
func (d *Double) Leak(eniID, ip string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.enis[eniID].ips = append(d.enis[eniID].ips, privateIP{addr: ip})
}
