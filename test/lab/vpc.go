package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

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
	routes   map[netip.Addr]string // address -> ENI, as last programmed ("" = none)
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
		macs: map[string]net.HardwareAddr{}, routes: map[netip.Addr]string{}, stop: make(chan struct{}), done: make(chan struct{})}
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
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
			return nil
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

// followEvery is how soon the network follows a change in EC2: well
// under the EC2 calls of a move, like a VPC that routes by the
// assignment as soon as the call returns.
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
	want := map[netip.Addr]string{}
	for a := v.addresses.Masked().Addr(); v.addresses.Contains(a); a = a.Next() {
		hs := v.EC2.Holders(a.String())
		eni := ""
		if len(hs) == 1 {
			eni = hs[0]
		}
		want[a] = eni
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	changed := map[netip.Addr]string{}
	for a, eni := range want {
		if cur, ok := v.routes[a]; !ok || cur != eni {
			changed[a] = eni
		}
	}
	if len(changed) == 0 {
		return nil
	}
	return labnet.Do(v.lab.Net.ClientNamespace(), func() error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
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
