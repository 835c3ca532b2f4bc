package netconf

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// linkInfo is what netconf needs to know of a network interface.
type linkInfo struct {
	Index        int
	Name         string
	HardwareAddr net.HardwareAddr
}

// linkSet indexes the namespace's interfaces.
type linkSet struct {
	byIndex map[int]linkInfo
	byName  map[string]linkInfo
}

func newLinkSet(links ...linkInfo) linkSet {
	s := linkSet{byIndex: map[int]linkInfo{}, byName: map[string]linkInfo{}}
	for _, l := range links {
		s.byIndex[l.Index] = l
		s.byName[l.Name] = l
	}
	return s
}

// name returns the name of the interface with index i, or "" when it is gone.
func (s linkSet) name(i int) string { return s.byIndex[i].Name }

// target is a valid desired assignment with its uplink resolved.
type target struct {
	Assignment
	link linkInfo
}

// snatKey is the key of the SNAT maps: traffic from Pod leaving through
// the interface with index Link.
type snatKey struct {
	Pod  netip.Addr
	Link int
}

// ruleSpec is a routing rule "from Pod lookup Table".
type ruleSpec struct {
	Pod   netip.Addr
	Table int
}

// natState is the content of kubext's nftables maps.
type natState struct {
	dnat map[netip.Addr]netip.Addr // static address -> pod
	snat map[snatKey]netip.Addr    // pod and uplink -> static address
}

func newNATState() natState {
	return natState{dnat: map[netip.Addr]netip.Addr{}, snat: map[snatKey]netip.Addr{}}
}

// addresses are the static addresses the state translates, sorted: what
// the hold gate owns (gate.go).
func (n natState) addresses() []netip.Addr {
	out := make([]netip.Addr, 0, len(n.dnat))
	for a := range n.dnat {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// state is what kubext has programmed in the namespace, as read back.
type state struct {
	addrs   []hostAddr            // addresses kubext added
	foreign map[netip.Addr]string // addresses others configured -> interface
	nat     natState
	rules   map[ruleSpec]bool
}

// assignments describes, sorted, every address s has a trace of (see
// Dataplane.Current): PodIP is set only where the address is on an
// interface whose SNAT entry and routing rule (tables from base) lead the
// DNAT's pod back to it.
func (s state) assignments(links linkSet, base int) []Assignment {
	out := make([]Assignment, 0, len(s.addrs))
	seen := map[netip.Addr]bool{}
	for _, a := range s.addrs {
		seen[a.IP] = true
		pod, ok := s.nat.dnat[a.IP]
		if !ok || s.nat.snat[snatKey{Pod: pod, Link: a.LinkIndex}] != a.IP || !s.rules[ruleSpec{Pod: pod, Table: base + a.LinkIndex}] {
			pod = netip.Addr{}
		}
		out = append(out, Assignment{Address: a.IP, PodIP: pod, Interface: links.name(a.LinkIndex)})
	}
	traces := slices.Collect(maps.Keys(s.nat.dnat))
	traces = append(traces, slices.Collect(maps.Values(s.nat.snat))...)
	for _, a := range traces {
		if !seen[a] {
			seen[a] = true
			out = append(out, Assignment{Address: a})
		}
	}
	slices.SortFunc(out, compareAssignments)
	return out
}

func compareAssignments(a, b Assignment) int {
	if c := a.Address.Compare(b.Address); c != 0 {
		return c
	}
	return strings.Compare(a.Interface, b.Interface)
}

// resolve validates desired and finds each assignment's uplink: the named
// interface, or the one of the longest main-table route matching the
// address. Invalid assignments go to failed, keyed by address; the kernel
// state of a failed address is left as it is.
func resolve(desired []Assignment, links linkSet, mainRoutes []netlink.Route, foreign map[netip.Addr]string) ([]target, map[netip.Addr]error) {
	failed := map[netip.Addr]error{}
	sorted := slices.Clone(desired)
	for i := range sorted {
		sorted[i].Address = sorted[i].Address.Unmap()
		sorted[i].PodIP = sorted[i].PodIP.Unmap()
	}
	slices.SortStableFunc(sorted, compareAssignments)

	count := map[netip.Addr]int{}
	for _, a := range sorted {
		count[a.Address]++
	}
	podOwner := map[netip.Addr]netip.Addr{}
	var targets []target
	for _, a := range sorted {
		if err := validate(a); err != nil {
			failed[a.Address] = err // an unset address is keyed by the zero Addr
			continue
		}
		if count[a.Address] > 1 {
			failed[a.Address] = fmt.Errorf("address is desired %d times", count[a.Address])
			continue
		}
		if other, ok := podOwner[a.PodIP]; ok {
			failed[a.Address] = fmt.Errorf("pod IP %s already holds %s: a pod can have one static IP per family", a.PodIP, other)
			continue
		}
		if ifname, ok := foreign[a.Address]; ok {
			failed[a.Address] = fmt.Errorf("address is already configured on %s, not by kubext", ifname)
			continue
		}
		if dst := gatewayOf(a.Address, mainRoutes); dst != "" {
			// Answering for the router's address would black-hole every
			// packet the node and its neighbours send through it.
			failed[a.Address] = fmt.Errorf("address is the gateway of this node's route to %s", dst)
			continue
		}
		link, err := uplink(a, links, mainRoutes)
		if err != nil {
			failed[a.Address] = err
			continue
		}
		podOwner[a.PodIP] = a.Address
		a.Interface = link.Name
		targets = append(targets, target{Assignment: a, link: link})
	}
	return targets, failed
}

// gatewayOf names the destination of a route whose gateway is addr, or "".
func gatewayOf(addr netip.Addr, routes []netlink.Route) string {
	for _, r := range routes {
		if gw, ok := netip.AddrFromSlice(r.Gw); ok && gw.Unmap() == addr {
			if r.Dst == nil {
				return "the default destination"
			}
			return r.Dst.String()
		}
	}
	return ""
}

func validate(a Assignment) error {
	switch {
	case !a.Address.IsValid():
		return errors.New("address is not set")
	case a.Address.IsUnspecified() || a.Address.IsLoopback() || a.Address.IsMulticast() || a.Address.IsLinkLocalUnicast():
		return fmt.Errorf("address %s cannot be a static IP (unspecified, loopback, multicast or link-local)", a.Address)
	case a.Address.Zone() != "":
		return errors.New("address must not have a zone")
	case !a.PodIP.IsValid():
		return errors.New("pod IP is not set")
	case a.PodIP.Is4() != a.Address.Is4():
		return fmt.Errorf("pod IP %s and address are of different families", a.PodIP)
	case a.PodIP == a.Address:
		return errors.New("pod IP equals the address")
	case a.PodIP.IsUnspecified() || a.PodIP.IsMulticast() || a.PodIP.Zone() != "":
		return fmt.Errorf("pod IP %s is not a unicast address", a.PodIP)
	}
	return nil
}

// uplink finds the interface of a.
func uplink(a Assignment, links linkSet, mainRoutes []netlink.Route) (linkInfo, error) {
	var link linkInfo
	if a.Interface != "" {
		l, ok := links.byName[a.Interface]
		if !ok {
			return linkInfo{}, fmt.Errorf("interface %s not found", a.Interface)
		}
		link = l
	} else {
		idx, err := routeInterface(a.Address, mainRoutes)
		if err != nil {
			return linkInfo{}, err
		}
		l, ok := links.byIndex[idx]
		if !ok {
			return linkInfo{}, fmt.Errorf("interface %d of the route to %s not found", idx, a.Address)
		}
		link = l
	}
	if link.Index <= 0 || link.Index >= routeTableSpan {
		return linkInfo{}, fmt.Errorf("interface %s has index %d; kubext's routing tables cover indexes below %d", link.Name, link.Index, routeTableSpan)
	}
	return link, nil
}

// routeInterface returns the interface of the main table's route to addr:
// the longest prefix containing it, the default route included, which must
// be a unicast route through an interface. It reads the table rather than
// asking the kernel for a route, because once the address is local the
// kernel's answer is the loopback.
func routeInterface(addr netip.Addr, mainRoutes []netlink.Route) (int, error) {
	var best *netlink.Route
	bestLen := -1
	for i, r := range mainRoutes {
		if r.Table != unix.RT_TABLE_MAIN {
			continue
		}
		dst, ok := routeDst(r, addr.Is4())
		if !ok || !dst.Contains(addr) || dst.Bits() <= bestLen {
			continue
		}
		best, bestLen = &mainRoutes[i], dst.Bits()
	}
	if best == nil {
		return 0, fmt.Errorf("no route to %s in the main table to choose an interface by; set the interface", addr)
	}
	idx := best.LinkIndex
	if idx == 0 && len(best.MultiPath) > 0 {
		idx = best.MultiPath[0].LinkIndex
	}
	if best.Type != unix.RTN_UNICAST || idx == 0 {
		return 0, fmt.Errorf("the main table's route to %s (%s) leads through no interface; set the interface", addr, best)
	}
	return idx, nil
}

// routeDst returns a route's destination; the default route has none.
func routeDst(r netlink.Route, v4 bool) (netip.Prefix, bool) {
	if r.Dst == nil {
		if v4 {
			return netip.PrefixFrom(netip.IPv4Unspecified(), 0), r.Family != unix.AF_INET6
		}
		return netip.PrefixFrom(netip.IPv6Unspecified(), 0), r.Family != unix.AF_INET
	}
	p, ok := prefixOf(r.Dst)
	if !ok || p.Addr().Is4() != v4 {
		return netip.Prefix{}, false
	}
	return p, true
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}

// families says which address families the desired addresses use.
type families struct{ v4, v6 bool }

// plan is what Apply must change, computed from the desired targets and
// the kernel state without touching the kernel.
type plan struct {
	addrDel []hostAddr
	addrAdd []target
	// nat and rules are the complete desired content; the writers diff.
	nat      natState
	rules    map[ruleSpec]bool
	families families
	stale    *staleFlows
	announce []target

	added, updated, unchanged []target
	removed                   []Assignment
	failed                    map[netip.Addr]error
	// dropped are addresses whose change failed: they are reported
	// in Errors only.
	dropped map[netip.Addr]bool
}

// makePlan compares desired targets with the kernel state. Addresses in
// failed keep whatever they have. first is true for a Dataplane's first
// Apply, which announces every desired address; unannounced are addresses
// whose last announcement failed.
func makePlan(targets []target, failed map[netip.Addr]error, cur state, opts Options, first bool, unannounced map[netip.Addr]bool) *plan {
	p := &plan{
		nat:     newNATState(),
		rules:   map[ruleSpec]bool{},
		stale:   newStaleFlows(opts.ExcludeSNAT),
		failed:  failed,
		dropped: map[netip.Addr]bool{},
	}
	for a := range failed {
		p.dropped[a] = true
	}
	desired := map[netip.Addr]target{}
	for _, t := range targets {
		desired[t.Address] = t
	}

	// What failed addresses have stays.
	for a := range failed {
		pod, ok := cur.nat.dnat[a]
		if !ok {
			continue
		}
		p.nat.dnat[a] = pod
		for k, v := range cur.nat.snat {
			if v == a {
				p.nat.snat[k] = v
			}
		}
		for r := range cur.rules {
			if r.Pod == pod {
				p.rules[r] = true
			}
		}
	}

	onLink := map[netip.Addr]bool{}    // desired address already on its uplink
	misplaced := map[netip.Addr]bool{} // a kubext copy on another interface
	for _, a := range cur.addrs {
		t, ok := desired[a.IP]
		switch {
		case ok && a.LinkIndex == t.link.Index:
			onLink[a.IP] = true
		case ok:
			misplaced[a.IP] = true
			p.addrDel = append(p.addrDel, a)
		case failed[a.IP] == nil:
			p.addrDel = append(p.addrDel, a)
		}
	}

	for _, t := range targets {
		table := opts.RouteTableBase + t.link.Index
		p.nat.dnat[t.Address] = t.PodIP
		p.nat.snat[snatKey{Pod: t.PodIP, Link: t.link.Index}] = t.Address
		p.rules[ruleSpec{Pod: t.PodIP, Table: table}] = true
		if t.Address.Is4() {
			p.families.v4 = true
		} else {
			p.families.v6 = true
		}

		oldPod, hasDNAT := cur.nat.dnat[t.Address]
		complete := onLink[t.Address] && !misplaced[t.Address] &&
			hasDNAT && oldPod == t.PodIP &&
			cur.nat.snat[snatKey{Pod: t.PodIP, Link: t.link.Index}] == t.Address &&
			cur.rules[ruleSpec{Pod: t.PodIP, Table: table}] &&
			!otherSNAT(cur.nat, t)
		if !onLink[t.Address] {
			p.addrAdd = append(p.addrAdd, t)
		}
		switch {
		case complete:
			p.unchanged = append(p.unchanged, t)
			if (first || unannounced[t.Address]) && !t.NoAnnounce {
				p.announce = append(p.announce, t)
			}
			continue
		case !onLink[t.Address] && !misplaced[t.Address] && !hasDNAT:
			p.added = append(p.added, t)
		default:
			p.updated = append(p.updated, t)
		}
		if !t.NoAnnounce {
			p.announce = append(p.announce, t)
		}
		p.stale.add(t.Address, t.PodIP)
		if hasDNAT {
			p.stale.add(t.Address, oldPod)
		}
	}

	// Removed: every address kubext has a trace of that is neither desired
	// nor failed.
	seen := map[netip.Addr]bool{}
	removed := func(a netip.Addr, ifname string) {
		if _, ok := desired[a]; ok || failed[a] != nil || seen[a] {
			return
		}
		seen[a] = true
		pod := cur.nat.dnat[a]
		p.removed = append(p.removed, Assignment{Address: a, PodIP: pod, Interface: ifname})
		p.stale.add(a, pod)
	}
	for _, a := range cur.addrs {
		removed(a.IP, a.linkName)
	}
	for a := range cur.nat.dnat {
		removed(a, "")
	}
	for _, v := range cur.nat.snat {
		removed(v, "")
	}
	slices.SortFunc(p.removed, compareAssignments)
	return p
}

// otherSNAT reports whether the SNAT maps lead another pod or uplink to
// t's address: a leftover of a previous holder that must go.
func otherSNAT(nat natState, t target) bool {
	for k, v := range nat.snat {
		if v == t.Address && k != (snatKey{Pod: t.PodIP, Link: t.link.Index}) {
			return true
		}
	}
	return false
}

// fail records that the change of address a failed.
func (p *plan) fail(a netip.Addr, err error) {
	p.failed[a] = errors.Join(p.failed[a], err)
	p.dropped[a] = true
}

// failAnnouncement records that a was programmed but not announced.
func (p *plan) failAnnouncement(a netip.Addr, err error) {
	p.failed[a] = errors.Join(p.failed[a], fmt.Errorf("announce: %w", err))
}

// abandonAdds marks every address that was to be added or changed as
// failed with err.
func (p *plan) abandonAdds(err error) {
	for _, t := range slices.Concat(p.added, p.updated) {
		p.fail(t.Address, err)
	}
	p.addrAdd = nil
	p.announce = nil
}

// finish builds the report.
func (p *plan) finish() Report {
	r := Report{Errors: p.failed}
	keep := func(ts []target) []Assignment {
		var out []Assignment
		for _, t := range ts {
			if !p.dropped[t.Address] {
				out = append(out, t.Assignment)
			}
		}
		return out
	}
	r.Added, r.Updated, r.Unchanged = keep(p.added), keep(p.updated), keep(p.unchanged)
	for _, a := range p.removed {
		if !p.dropped[a.Address] {
			r.Removed = append(r.Removed, a)
		}
	}
	return r
}
