package netconf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// staleFlows selects the conntrack entries that must go when static
// addresses arrive on, change on, or leave this node. NAT is decided once
// per connection, when its entry is created; an entry that outlives the
// change keeps the old decision for as long as packets refresh it (a UDP
// flow to a partner: forever).
type staleFlows struct {
	addrs   map[netip.Addr]bool // static addresses that changed
	pods    map[netip.Addr]bool // pods that gained, changed or lost one
	exclude []netip.Prefix
}

func newStaleFlows(exclude []netip.Prefix) *staleFlows {
	return &staleFlows{addrs: map[netip.Addr]bool{}, pods: map[netip.Addr]bool{}, exclude: exclude}
}

// add selects the flows of a static address and of a pod; invalid values
// are ignored.
func (s *staleFlows) add(addr, pod netip.Addr) {
	if addr.IsValid() {
		s.addrs[addr] = true
	}
	if pod.IsValid() {
		s.pods[pod] = true
	}
}

// families says which conntrack tables need a pass.
func (s *staleFlows) families() families {
	var f families
	for a := range s.addrs {
		f.v4, f.v6 = f.v4 || a.Is4(), f.v6 || a.Is6()
	}
	for a := range s.pods {
		f.v4, f.v6 = f.v4 || a.Is4(), f.v6 || a.Is6()
	}
	return f
}

// MatchConntrackFlow selects:
//   - flows to a static address (inbound, DNATed to its pod), whatever the
//     direction of the change;
//   - flows whose reply comes from or goes to a static address (the pod's
//     traffic SNATed to it): on the node losing the address they would go
//     on leaving with it, so two nodes would send from one address;
//   - flows of a pod to destinations outside ExcludeSNAT that someone else
//     NATed (reply not to the pod, e.g. masqueraded to the node's address
//     before the pod became the holder): left alone they keep the wrong
//     source, the "wrong source IP after takeover" users complain about.
//
// A pod's flows that nobody NATed, and flows to excluded destinations
// (other pods, services), are kept.
func (s *staleFlows) MatchConntrackFlow(f *netlink.ConntrackFlow) bool {
	origSrc, origDst := ipAddr(f.Forward.SrcIP), ipAddr(f.Forward.DstIP)
	replySrc, replyDst := ipAddr(f.Reverse.SrcIP), ipAddr(f.Reverse.DstIP)
	if s.addrs[origDst] || s.addrs[replySrc] || s.addrs[replyDst] {
		return true
	}
	return s.pods[origSrc] && replyDst != origSrc && !s.excluded(origDst)
}

func (s *staleFlows) excluded(a netip.Addr) bool {
	for _, p := range s.exclude {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func ipAddr(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// flushConntrack deletes the selected flows, one conntrack dump per
// family.
func (k *kernel) flushConntrack(s *staleFlows) error {
	f := s.families()
	var errs []error
	for _, fam := range []struct {
		use    bool
		family netlink.InetFamily
	}{{f.v4, unix.AF_INET}, {f.v6, unix.AF_INET6}} {
		if !fam.use {
			continue
		}
		n, err := k.nl.ConntrackDeleteFilters(netlink.ConntrackTable, fam.family, s)
		if err != nil {
			errs = append(errs, fmt.Errorf("delete conntrack entries: %w", err))
			continue
		}
		if n > 0 {
			k.log.V(1).Info("deleted conntrack entries", "count", n, "family", fam.family)
		}
	}
	return errors.Join(errs...)
}
