package aws

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// Address is an IP object's address as the provider handles it.
type Address struct {
	// Name is the IP object's name; Elastic IPs the provider allocates are
	// tagged kubext.io/ip=<Name>.
	Name string
	// IP is the address itself.
	IP netip.Addr
	// PublicIPv4Pool is the pool's spec.aws.publicIPv4Pool: empty in private
	// mode, the BYOIP pool (ipv4pool-ec2-...) in public mode.
	PublicIPv4Pool string
}

func (a Address) public() bool { return a.PublicIPv4Pool != "" }

// NodeTarget is where on EC2 a node would hold an address.
type NodeTarget struct {
	// InstanceID is the node's EC2 instance (from spec.providerID).
	InstanceID string
	// VPCID is the VPC of the chosen network interface.
	VPCID string
	// ENI is the network interface the address goes to: in private mode the
	// one in the subnet that contains the address, in public mode the one
	// at the configured device index (0 by default).
	ENI string
	// SubnetID and SubnetCIDR are the ENI's subnet.
	SubnetID   string
	SubnetCIDR netip.Prefix
}

// InstanceIDFromProviderID returns the instance ID of a node's
// spec.providerID, aws:///<zone>/<instance-id> (aws://<zone>/<id> is
// accepted too).
func InstanceIDFromProviderID(providerID string) (string, error) {
	rest, ok := strings.CutPrefix(providerID, "aws://")
	if !ok {
		return "", errorf(ReasonInstanceNotFound, "node spec.providerID %q is not an EC2 one (aws:///<zone>/<instance-id>); is the node on EC2 with the AWS cloud provider?", providerID)
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	id := parts[len(parts)-1]
	if !strings.HasPrefix(id, "i-") {
		return "", errorf(ReasonInstanceNotFound, "node spec.providerID %q does not end in an EC2 instance ID (i-...)", providerID)
	}
	return id, nil
}

// Resolve finds the instance behind providerID and the network interface
// that would hold a: the one whose subnet contains the address (private
// mode; none is an error with reason AddressNotInNodeSubnets) or the one at
// the public device index (public mode).
func (p *Provider) Resolve(ctx context.Context, providerID string, a Address) (NodeTarget, error) {
	id, err := InstanceIDFromProviderID(providerID)
	if err != nil {
		return NodeTarget{}, err
	}
	out, err := p.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return NodeTarget{}, ec2Error("DescribeInstances", "instance "+id, err)
	}
	var inst *types.Instance
	for i := range out.Reservations {
		for j := range out.Reservations[i].Instances {
			if sdkaws.ToString(out.Reservations[i].Instances[j].InstanceId) == id {
				inst = &out.Reservations[i].Instances[j]
			}
		}
	}
	if inst == nil {
		return NodeTarget{}, errorf(ReasonInstanceNotFound, "EC2 DescribeInstances did not return instance %s (node %s)", id, providerID)
	}
	enis := append([]types.InstanceNetworkInterface(nil), inst.NetworkInterfaces...)
	sort.Slice(enis, func(i, j int) bool { return deviceIndex(enis[i]) < deviceIndex(enis[j]) })
	if len(enis) == 0 {
		return NodeTarget{}, errorf(ReasonNetworkInterfaceNotFound, "instance %s has no network interface", id)
	}
	subnetIDs := make([]string, 0, len(enis))
	for _, e := range enis {
		if s := sdkaws.ToString(e.SubnetId); s != "" && !contains(subnetIDs, s) {
			subnetIDs = append(subnetIDs, s)
		}
	}
	sout, err := p.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: subnetIDs})
	if err != nil {
		return NodeTarget{}, ec2Error("DescribeSubnets", "subnets of instance "+id, err)
	}
	cidrs := map[string]netip.Prefix{}
	for _, s := range sout.Subnets {
		if pfx, err := netip.ParsePrefix(sdkaws.ToString(s.CidrBlock)); err == nil {
			cidrs[sdkaws.ToString(s.SubnetId)] = pfx
		}
	}
	unmanaged, err := p.unmanagedENIs(ctx, enis)
	if err != nil {
		return NodeTarget{}, err
	}
	// ENIs tagged no_manage come first: the AWS VPC CNI leaves them alone,
	// while it counts secondary IPs of the ENIs it manages as pod addresses.
	sort.SliceStable(enis, func(i, j int) bool {
		return unmanaged[sdkaws.ToString(enis[i].NetworkInterfaceId)] && !unmanaged[sdkaws.ToString(enis[j].NetworkInterfaceId)]
	})
	target := func(e types.InstanceNetworkInterface) NodeTarget {
		return NodeTarget{InstanceID: id, VPCID: sdkaws.ToString(e.VpcId), ENI: sdkaws.ToString(e.NetworkInterfaceId),
			SubnetID: sdkaws.ToString(e.SubnetId), SubnetCIDR: cidrs[sdkaws.ToString(e.SubnetId)]}
	}
	if a.public() {
		for _, e := range enis {
			if unmanaged[sdkaws.ToString(e.NetworkInterfaceId)] || deviceIndex(e) == p.publicDeviceIndex {
				t := target(e)
				if t.VPCID == "" {
					t.VPCID = sdkaws.ToString(inst.VpcId)
				}
				return t, nil
			}
		}
		return NodeTarget{}, errorf(ReasonNetworkInterfaceNotFound, "instance %s has no network interface at device index %d for Elastic IP %s", id, p.publicDeviceIndex, a.IP)
	}
	var seen []string
	for _, e := range enis {
		s := sdkaws.ToString(e.SubnetId)
		if pfx, ok := cidrs[s]; ok && pfx.Contains(a.IP) {
			t := target(e)
			if t.VPCID == "" {
				t.VPCID = sdkaws.ToString(inst.VpcId)
			}
			return t, nil
		}
		seen = append(seen, fmt.Sprintf("%s %s (%s)", sdkaws.ToString(e.NetworkInterfaceId), s, cidrs[s]))
	}
	return NodeTarget{}, errorf(ReasonAddressNotInNodeSubnets,
		"address %s is in no subnet of instance %s's network interfaces (%s): EC2 can only assign a private address of the interface's own subnet; put the pool's addresses in the nodes' subnet, select nodes in that subnet with spec.nodeSelector, or use a BYOIP pool (spec.aws.publicIPv4Pool)",
		a.IP, id, strings.Join(seen, ", "))
}

// UnmanagedTagKey is the tag (value "true") by which the AWS VPC CNI leaves
// an ENI alone. Resolve prefers such an ENI: in private mode one in the
// address's subnet, in public mode any over the configured device index.
const UnmanagedTagKey = "node.k8s.amazonaws.com/no_manage"

// unmanagedENIs reads the tags of the instance's ENIs (DescribeInstances
// does not return them).
func (p *Provider) unmanagedENIs(ctx context.Context, enis []types.InstanceNetworkInterface) (map[string]bool, error) {
	ids := make([]string, 0, len(enis))
	for _, e := range enis {
		ids = append(ids, sdkaws.ToString(e.NetworkInterfaceId))
	}
	out, err := p.ec2.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: ids})
	if err != nil {
		return nil, ec2Error("DescribeNetworkInterfaces", "read the tags of "+strings.Join(ids, ", "), err)
	}
	m := map[string]bool{}
	for _, n := range out.NetworkInterfaces {
		for _, t := range n.TagSet {
			if sdkaws.ToString(t.Key) == UnmanagedTagKey && sdkaws.ToString(t.Value) == "true" {
				m[sdkaws.ToString(n.NetworkInterfaceId)] = true
			}
		}
	}
	return m, nil
}

func deviceIndex(e types.InstanceNetworkInterface) int32 {
	if e.Attachment == nil || e.Attachment.DeviceIndex == nil {
		return 1 << 30
	}
	return *e.Attachment.DeviceIndex
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
