package lab

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kubext/kubext/internal/provider/aws/ec2double"
	"github.com/kubext/kubext/test/lab/labnet"
)

// VPC models an EC2 VPC around the lab: an EC2-protocol endpoint on
// 127.0.0.1, one instance with one ENI per lab node (the node's
// spec.providerID names it), and a lab network that follows EC2's state.
//
// The endpoint serves the in-memory EC2 of internal/provider/aws/ec2double
// over EC2's query protocol, rather than moto_server: moto lets an address
// sit on two ENIs after a reassignment and accepts assigning a held address
// without AllowReassignment (see the provider's conformance tests), so a
// lab on moto would show two nodes receiving one address, which a VPC
// never does. The double implements the semantics the provider relies on,
// and the provider's wire tests run the real SDK client against it.
//
// The network follows EC2, not ARP: for every address of Addresses, the
// client namespace's neighbour table holds a permanent entry pointing at
// the MAC of the node whose ENI holds the address as a secondary private
// IP, or at a MAC nobody has when no ENI holds it. A gratuitous ARP, or a
// node that still has the address on its interface, changes nothing: as
// in a VPC, only EC2's assignment decides which node receives it.
type VPC struct {
	// EC2 is the VPC's EC2; tests may inject faults and latency.
	EC2 *ec2double.Double
	// Endpoint is the EC2 endpoint URL (http://127.0.0.1:port) for the
	// manager's --aws-endpoint.
	Endpoint string
	// Instances and ENIs are each node's, by node name.
	Instances, ENIs map[string]string

	lab       *Lab
	addresses netip.Prefix
	macs      map[string]net.HardwareAddr // ENI -> its node's eth0 MAC
	srv       *http.Server
	stop      chan struct{}
	done      chan struct{}

	mu       sync.Mutex
	routes   map[netip.Addr]string     // address -> ENI, as last programmed ("" = none)
	nat      map[netip.Addr]netip.Addr // Elastic IP -> private IP, as last programmed
	lastErr  error
	stopOnce sync.Once
}

// VPCOptions configure StartVPC.
type VPCOptions struct {
	// Addresses are the secondary private IPs the network routes by EC2's
	// state (the aws IPPool's addresses); they must be in the lab subnet.
	Addresses netip.Prefix
	// Latency delays every EC2 call (a benchmark's stand-in for EC2's own
	// latency).
	Latency time.Duration
	// PublicPool and PublicRange make a BYOIP pool of Elastic IPs
	// (optional). The client reaches an associated Elastic IP through a
	// 1:1 NAT to its private IP, as through an internet gateway, and sees
	// the private IP's traffic as coming from the Elastic IP. PublicRange
	// must not be on the client's link.
	PublicPool  string
	PublicRange netip.Prefix
	// OnGateway serves the EC2 endpoint on the lab's gateway address
	// instead of 127.0.0.1, so that pods (a deployed manager) reach it, as
	// they would reach EC2's regional endpoint.
	OnGateway bool
}

// deadMAC is where an address no ENI holds is sent: no node has it.
var deadMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}

// StartVPC starts the VPC model of a lab with a network. It sets each
// node's spec.providerID to aws:///lab-1a/<instance>, which a node keeps
// for its life: start one VPC per lab.
func (l *Lab) StartVPC(ctx context.Context, o VPCOptions) (*VPC, error) {
	if l.Net == nil {
		return nil, errors.New("lab: the VPC model needs the lab network")
	}
	if !l.Net.Subnet.Contains(o.Addresses.Addr()) || o.Addresses.Bits() < l.Net.Subnet.Bits() {
		return nil, fmt.Errorf("lab: VPC addresses %s are not inside the lab subnet %s", o.Addresses, l.Net.Subnet)
	}
	d := ec2double.New()
	d.Latency = o.Latency
	d.IPLimit = 50
	v := &VPC{EC2: d, Instances: map[string]string{}, ENIs: map[string]string{}, lab: l, addresses: o.Addresses,
		macs: map[string]net.HardwareAddr{}, routes: map[netip.Addr]string{}, nat: map[netip.Addr]netip.Addr{}, stop: make(chan struct{}), done: make(chan struct{})}
	if o.PublicPool != "" {
		if o.PublicRange.Overlaps(l.Net.Subnet) {
			return nil, fmt.Errorf("lab: VPC public range %s is on the lab subnet %s", o.PublicRange, l.Net.Subnet)
		}
		d.AddPool(o.PublicPool, o.PublicRange.String())
		// The client's way to the Elastic IPs is its gateway, as to the
		// internet; the NAT then sends each to its private IP. The route
		// also overrides a lab route that makes the range unreachable
		// (the pod subnet's), which would refuse the connection before
		// the NAT sees it.
		gw := l.Net.Gateway()
		err := labnet.Do(l.Net.ClientNamespace(), func() error {
			return netlink.RouteReplace(&netlink.Route{Dst: prefixNet(o.PublicRange), Gw: gw.AsSlice()})
		})
		if err != nil {
			return nil, fmt.Errorf("lab: routing %s in the client namespace: %w", o.PublicRange, err)
		}
	}
	subnet := d.AddSubnet("vpc-lab", l.Net.Subnet.String())
	// Addresses of the lab that are no node's: EC2 must never hand them
	// out as secondary private IPs.
	d.AddENI(subnet, l.Net.Gateway().String())
	d.AddENI(subnet, l.Net.ClientAddr().String())
	for _, n := range l.Nodes {
		inst, eni := d.AddInstanceAt(subnet, l.Net.NodeAddr(n).String())
		v.Instances[n], v.ENIs[n] = inst, eni
		mac, err := eth0MAC(l.Net.NodeNamespace(n))
		if err != nil {
			return nil, err
		}
		v.macs[eni] = mac
		if err := l.patchNode(ctx, n, map[string]any{"spec": map[string]any{"providerID": "aws:///lab-1a/" + inst}}); err != nil {
			return nil, fmt.Errorf("setting the providerID of %s: %w", n, err)
		}
	}
	host := "127.0.0.1"
	if o.OnGateway {
		host = l.Net.Gateway().String()
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	v.Endpoint = "http://" + ln.Addr().String()
	v.srv = &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = v.srv.Serve(ln) }()
	if err := v.sync(); err != nil {
		_ = v.srv.Close()
		return nil, err
	}
	go v.follow()
	l.log("VPC model: EC2 endpoint %s, %d instances, routing %s by EC2's state", v.Endpoint, len(l.Nodes), o.Addresses)
	return v, nil
}

// Stop stops the endpoint and the network following, and removes the
// neighbour entries it made.
func (v *VPC) Stop() error {
	var err error
	v.stopOnce.Do(func() {
		close(v.stop)
		<-v.done
		err = v.srv.Close()
		err = errors.Join(err, labnet.Do(v.lab.Net.ClientNamespace(), func() error {
			link, lerr := netlink.LinkByName("eth0")
			if lerr != nil {
				return lerr
			}
			for a := range v.routes {
				_ = netlink.NeighDel(&netlink.Neigh{LinkIndex: link.Attrs().Index, Family: unix.AF_INET, IP: a.AsSlice()})
			}
			return programNAT(nil)
		}))
	})
	return err
}

// Err is the last error of the network following, if any.
func (v *VPC) Err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lastErr
}

// HolderENI is the ENI that EC2 says holds addr ("" for none).
func (v *VPC) HolderENI(addr netip.Addr) string {
	hs := v.EC2.Holders(addr.String())
	if len(hs) != 1 {
		return ""
	}
	return hs[0]
}

// NodeOfENI is the lab node whose instance has eni ("" for none).
func (v *VPC) NodeOfENI(eni string) string {
	for n, e := range v.ENIs {
		if e == eni {
			return n
		}
	}
	return ""
}

// followEvery bounds how soon the network follows a change in EC2; it
// follows a mutating call of the endpoint as soon as it returns, like a
// VPC that routes by the assignment once the call has returned.
const followEvery = 10 * time.Millisecond

func (v *VPC) follow() {
	defer close(v.done)
	t := time.NewTicker(followEvery)
	defer t.Stop()
	for {
		select {
		case <-v.stop:
			return
		case <-t.C:
		case <-v.EC2.Changes():
		}
		err := v.sync()
		v.mu.Lock()
		v.lastErr = err
		v.mu.Unlock()
	}
}

// sync points the client's neighbour entry of every address at the node
// whose ENI holds it in EC2, or at no node.
func (v *VPC) sync() error {
	holder := func(a netip.Addr) string {
		if hs := v.EC2.Holders(a.String()); len(hs) == 1 {
			return hs[0]
		}
		return ""
	}
	want := map[netip.Addr]string{}
	for a := v.addresses.Masked().Addr(); v.addresses.Contains(a); a = a.Next() {
		want[a] = holder(a)
	}
	nat := map[netip.Addr]netip.Addr{}
	// The private IPs of Elastic IPs, while associated, wherever they are.
	for pub, priv := range v.EC2.Associations() {
		p, perr := netip.ParseAddr(pub)
		q, qerr := netip.ParseAddr(priv)
		if perr == nil && qerr == nil {
			nat[p] = q
			want[q] = holder(q)
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	changed, forget := planNeighbours(v.routes, want)
	if !maps.Equal(nat, v.nat) {
		if err := labnet.Do(v.lab.Net.ClientNamespace(), func() error { return programNAT(nat) }); err != nil {
			return fmt.Errorf("the client's 1:1 NAT: %w", err)
		}
		v.nat = nat
	}
	if len(changed) == 0 && len(forget) == 0 {
		return nil
	}
	return labnet.Do(v.lab.Net.ClientNamespace(), func() error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		for _, a := range forget {
			err := netlink.NeighDel(&netlink.Neigh{LinkIndex: link.Attrs().Index, Family: unix.AF_INET, IP: a.AsSlice()})
			if err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("forgetting %s: %w", a, err)
			}
			delete(v.routes, a)
		}
		for a, eni := range changed {
			mac := deadMAC
			if m, ok := v.macs[eni]; ok {
				mac = m
			}
			if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: link.Attrs().Index, Family: unix.AF_INET,
				State: netlink.NUD_PERMANENT, IP: a.AsSlice(), HardwareAddr: mac}); err != nil {
				return fmt.Errorf("routing %s to %s: %w", a, mac, err)
			}
			v.routes[a] = eni
		}
		return nil
	})
}

// planNeighbours compares the client's neighbour entries as programmed
// (have: address -> ENI, "" for a MAC nobody has) with what EC2 says
// (want): the entries to set, and those to delete. An address in have but
// not in want is the private IP of an association that ended and outside
// the routed range: its entry goes, and the address is the lab's again
// (reached through ARP). Pointing it at nobody for good, as before, left
// the address dead for every later test that used it: the provider picks
// an Elastic IP's private IP at random in the subnet, which the lab's
// other static IP pools share.
func planNeighbours(have, want map[netip.Addr]string) (set map[netip.Addr]string, forget []netip.Addr) {
	set = map[netip.Addr]string{}
	for a, eni := range want {
		if cur, ok := have[a]; !ok || cur != eni {
			set[a] = eni
		}
	}
	for a := range have {
		if _, ok := want[a]; !ok {
			forget = append(forget, a)
		}
	}
	slices.SortFunc(forget, netip.Addr.Compare)
	return set, forget
}

func eth0MAC(namespace string) (net.HardwareAddr, error) {
	var mac net.HardwareAddr
	err := labnet.Do(namespace, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		mac = l.Attrs().HardwareAddr
		return nil
	})
	return mac, err
}

// natTable is the client namespace's nftables table of the 1:1 NAT.
const natTable = "kxvpc"

// programNAT replaces the calling namespace's 1:1 NAT (run inside the
// client's namespace) in one transaction: traffic the client sends to an
// Elastic IP goes to its private IP, and traffic from the private IP
// reaches the client from the Elastic IP, as through an internet gateway.
// Nil or empty removes it.
func programNAT(nat map[netip.Addr]netip.Addr) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := &nftables.Table{Name: natTable, Family: nftables.TableFamilyIPv4}
	// Adding then deleting makes the delete succeed when there is no
	// table yet; the batch is one transaction.
	c.AddTable(t)
	c.DelTable(t)
	if len(nat) > 0 {
		c.AddTable(t)
		dstnat, srcnat := nftables.ChainPriorityNATDest, nftables.ChainPriorityNATSource
		out := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookOutput, Priority: dstnat})
		in := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookInput, Priority: srcnat})
		for pub, priv := range nat {
			c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: natRule(16, pub, priv, expr.NATTypeDestNAT)})
			c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: natRule(12, priv, pub, expr.NATTypeSourceNAT)})
		}
	}
	return c.Flush()
}

// natRule matches the IPv4 header's address at offset (12 source, 16
// destination) against match and translates it to to.
func natRule(offset uint32, match, to netip.Addr, kind expr.NATType) []expr.Any {
	return []expr.Any{
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: match.AsSlice()},
		&expr.Immediate{Register: 1, Data: to.AsSlice()},
		&expr.NAT{Type: kind, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
	}
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Masked().Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
