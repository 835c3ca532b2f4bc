package netconf

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestStaleFlows(t *testing.T) {
	const (
		static = "198.51.100.10"
		pod    = "10.0.0.1"
		node   = "198.51.100.2"
		remote = "203.0.113.7"
	)
	s := newStaleFlows([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12")})
	s.add(addrOf(static), addrOf(pod))

	flow := func(origSrc, origDst, replySrc, replyDst string) *netlink.ConntrackFlow {
		return &netlink.ConntrackFlow{
			Forward: netlink.IPTuple{SrcIP: net.ParseIP(origSrc), DstIP: net.ParseIP(origDst)},
			Reverse: netlink.IPTuple{SrcIP: net.ParseIP(replySrc), DstIP: net.ParseIP(replyDst)},
		}
	}
	tests := []struct {
		name string
		flow *netlink.ConntrackFlow
		want bool
	}{
		{"inbound to the address, DNATed to the pod", flow(remote, static, pod, remote), true},
		{"inbound to the address, not NATed yet", flow(remote, static, static, remote), true},
		{"the pod's traffic SNATed to the address", flow(pod, remote, remote, static), true},
		{"the pod's traffic masqueraded as the node", flow(pod, remote, remote, node), true},
		{"the pod's traffic nobody NATed", flow(pod, remote, remote, pod), false},
		{"the pod to a service, DNATed to another pod", flow(pod, "172.16.0.10", "10.0.0.2", pod), false},
		{"the pod to another pod, masqueraded", flow(pod, "10.0.0.2", "10.0.0.2", node), false},
		{"another pod", flow("10.0.0.3", remote, remote, node), false},
		{"the node itself", flow(node, remote, remote, node), false},
	}
	for _, tt := range tests {
		if got := s.MatchConntrackFlow(tt.flow); got != tt.want {
			t.Errorf("%s: match %t, want %t", tt.name, got, tt.want)
		}
	}
	if f := s.families(); !f.v4 || f.v6 {
		t.Errorf("families %+v, want IPv4 only", f)
	}
}
