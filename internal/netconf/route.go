package netconf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Policy routing: the pod's traffic must leave through the interface that
// holds its static address, because that is where the replies to the
// address arrive, and where upstream filters expect the address. A rule
// "from <pod> lookup <uplink table>" sends it to a table holding copies of
// the main table's routes through the uplink (connected subnet, gateway),
// plus "throw" routes for ExcludeSNAT, which end the lookup in that table
// so excluded destinations (other pods, services) follow the main table as
// before. A destination the uplink has no route to also falls through to
// the main table, and is then not SNATed (the SNAT map is keyed by the
// outgoing interface too).

// ip6DefaultMetric is the metric the kernel gives IPv6 routes added
// without one; throw routes get it explicitly so that reading them back
// compares equal.
const ip6DefaultMetric = 1024

// retryDump calls list until it is not interrupted by concurrent changes,
// at most maxDumpAttempts times.
func retryDump[T any](list func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := list()
		if err == nil || !errors.Is(err, netlink.ErrDumpInterrupted) || attempt == maxDumpAttempts {
			return v, err
		}
	}
}

// ownsTable reports whether table is in kubext's range.
func (k *kernel) ownsTable(table int) bool {
	return table >= k.opts.RouteTableBase && table < k.opts.RouteTableBase+routeTableSpan
}

// mainRoutes lists the main table of both families.
func (k *kernel) mainRoutes() ([]netlink.Route, error) {
	routes, err := retryDump(func() ([]netlink.Route, error) {
		return k.nl.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, fmt.Errorf("list main routes: %w", err)
	}
	return routes, nil
}

// routeKey identifies a route within the kernel's tables: what
// RTM_NEWROUTE with NLM_F_REPLACE replaces.
type routeKey struct {
	table    int
	family   int
	dst      netip.Prefix
	priority int
	tos      int
}

func keyOf(r netlink.Route) routeKey {
	fam := routeFamily(r)
	dst, _ := routeDst(r, fam == unix.AF_INET)
	return routeKey{table: r.Table, family: fam, dst: dst, priority: r.Priority, tos: r.Tos}
}

func routeFamily(r netlink.Route) int {
	switch {
	case r.Dst != nil:
		if r.Dst.IP.To4() != nil {
			return unix.AF_INET
		}
		return unix.AF_INET6
	case r.Gw != nil:
		if r.Gw.To4() != nil {
			return unix.AF_INET
		}
		return unix.AF_INET6
	}
	return r.Family
}

// routeContent is what kubext compares of two routes with the same key.
// Throw routes have no interface (the kernel reports IPv6 ones on lo).
func routeContent(r netlink.Route) string {
	if r.Type != unix.RTN_UNICAST {
		return fmt.Sprintf("type=%d proto=%d", r.Type, r.Protocol)
	}
	s := fmt.Sprintf("type=%d link=%d gw=%s src=%s scope=%d flags=%d proto=%d", r.Type, r.LinkIndex, r.Gw, r.Src, r.Scope, r.Flags&unix.RTNH_F_ONLINK, r.Protocol)
	for _, nh := range r.MultiPath {
		s += fmt.Sprintf(" nh=%d/%s/%d", nh.LinkIndex, nh.Gw, nh.Flags&unix.RTNH_F_ONLINK)
	}
	return s
}

// uplinkRoutes returns the routes of one family of the table of the
// uplink with index link: copies of the main table's unicast routes
// through it, and throw routes for the excluded prefixes.
func uplinkRoutes(main []netlink.Route, link, table, family int, exclude []netip.Prefix) []netlink.Route {
	var out []netlink.Route
	for _, r := range main {
		if r.Table != unix.RT_TABLE_MAIN || r.Type != unix.RTN_UNICAST || routeFamily(r) != family {
			continue
		}
		c := netlink.Route{
			Table:     table,
			Family:    family,
			Dst:       r.Dst,
			Src:       r.Src,
			Gw:        r.Gw,
			LinkIndex: r.LinkIndex,
			Scope:     r.Scope,
			Type:      unix.RTN_UNICAST,
			Priority:  r.Priority,
			Tos:       r.Tos,
			Flags:     r.Flags & unix.RTNH_F_ONLINK,
			Protocol:  AddressProtocol,
		}
		if len(r.MultiPath) > 0 {
			// Keep the next hops through the uplink only.
			var hops []*netlink.NexthopInfo
			for _, nh := range r.MultiPath {
				if nh.LinkIndex == link {
					hops = append(hops, &netlink.NexthopInfo{LinkIndex: nh.LinkIndex, Gw: nh.Gw, Flags: nh.Flags & unix.RTNH_F_ONLINK})
				}
			}
			switch len(hops) {
			case 0:
				continue
			case 1:
				c.LinkIndex, c.Gw, c.Flags = hops[0].LinkIndex, hops[0].Gw, hops[0].Flags
			default:
				c.LinkIndex, c.Gw, c.MultiPath = 0, nil, hops
			}
		} else if r.LinkIndex != link {
			continue
		}
		out = append(out, c)
	}
	for _, p := range exclude {
		if p.Addr().Is4() != (family == unix.AF_INET) {
			continue
		}
		metric := 0
		if family == unix.AF_INET6 {
			metric = ip6DefaultMetric
		}
		out = append(out, netlink.Route{
			Table:    table,
			Family:   family,
			Dst:      &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
			Type:     unix.RTN_THROW,
			Priority: metric,
			Protocol: AddressProtocol,
		})
	}
	return out
}

// tableRoutes builds the desired content of kubext's tables: one per
// uplink and family in use by the rules.
func tableRoutes(rules map[ruleSpec]bool, main []netlink.Route, base int, exclude []netip.Prefix) map[routeKey]netlink.Route {
	type use struct{ table, family int }
	uses := map[use]bool{}
	for r := range rules {
		fam := unix.AF_INET
		if r.Pod.Is6() {
			fam = unix.AF_INET6
		}
		uses[use{r.Table, fam}] = true
	}
	want := map[routeKey]netlink.Route{}
	for u := range uses {
		for _, r := range uplinkRoutes(main, u.table-base, u.table, u.family, exclude) {
			want[keyOf(r)] = r
		}
	}
	return want
}

// syncTables makes kubext's tables hold exactly want. It returns the
// failures per table and family (routes being added) and the failures of
// deleting routes.
func (k *kernel) syncTables(adm pass, want map[routeKey]netlink.Route) (map[routeKey]error, []error) {
	all, err := retryDump(func() ([]netlink.Route, error) {
		return k.nl.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, []error{fmt.Errorf("list routes: %w", err)}
	}
	have := map[routeKey]netlink.Route{}
	var errs []error
	for _, r := range all {
		if !k.ownsTable(r.Table) {
			continue
		}
		key := keyOf(r)
		if w, ok := want[key]; ok && routeContent(w) == routeContent(r) {
			have[key] = r
			continue
		}
		if _, ok := want[key]; ok {
			continue // replaced below
		}
		if err := k.nl.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete route %s: %w", r, err))
		}
	}
	failed := map[routeKey]error{}
	keys := make([]routeKey, 0, len(want))
	for key := range want {
		keys = append(keys, key)
	}
	// Connected routes before those through a gateway on them.
	slices.SortFunc(keys, func(a, b routeKey) int { return b.dst.Bits() - a.dst.Bits() })
	for _, key := range keys {
		if _, ok := have[key]; ok {
			continue
		}
		r := want[key]
		if err := adm.add(func() error { return k.nl.RouteReplace(&r) }); err != nil {
			failed[key] = fmt.Errorf("route %s in table %d: %w", r, r.Table, err)
		}
	}
	return failed, errs
}

// ownedRules lists kubext's rules: its priority, a table in its range.
func (k *kernel) ownedRules() ([]netlink.Rule, error) {
	var out []netlink.Rule
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		rules, err := retryDump(func() ([]netlink.Rule, error) {
			return k.nl.RuleListFiltered(fam, &netlink.Rule{Priority: k.opts.RulePriority}, netlink.RT_FILTER_PRIORITY)
		})
		if err != nil {
			return nil, fmt.Errorf("list rules: %w", err)
		}
		for _, r := range rules {
			if k.ownsTable(r.Table) {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// newRule returns kubext's rule for spec.
func (k *kernel) newRule(spec ruleSpec) *netlink.Rule {
	r := netlink.NewRule()
	r.Priority = k.opts.RulePriority
	r.Table = spec.Table
	r.Protocol = AddressProtocol
	r.Family = unix.AF_INET
	if spec.Pod.Is6() {
		r.Family = unix.AF_INET6
	}
	r.Src = &net.IPNet{IP: spec.Pod.AsSlice(), Mask: net.CIDRMask(spec.Pod.BitLen(), spec.Pod.BitLen())}
	return r
}

// syncRules makes kubext's rules exactly want. It returns the failures of
// adding rules, and of deleting them.
func (k *kernel) syncRules(adm pass, want map[ruleSpec]bool) (map[ruleSpec]error, []error) {
	rules, err := k.ownedRules()
	if err != nil {
		return nil, []error{err}
	}
	have := map[ruleSpec]bool{}
	var errs []error
	for _, r := range rules {
		spec, ok := ruleSpecOf(r)
		if ok && want[spec] && !have[spec] {
			have[spec] = true
			continue
		}
		del := r
		if err := k.nl.RuleDel(&del); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete rule %s: %w", r, err))
		}
	}
	failed := map[ruleSpec]error{}
	for spec := range want {
		if have[spec] {
			continue
		}
		if err := adm.add(func() error { return k.nl.RuleAdd(k.newRule(spec)) }); err != nil {
			failed[spec] = fmt.Errorf("add rule from %s lookup %d: %w", spec.Pod, spec.Table, err)
		}
	}
	return failed, errs
}

// syncRouting converges tables and rules to the plan, attributing
// failures to the addresses they affect.
func (k *kernel) syncRouting(adm pass, p *plan, mainRoutes []netlink.Route) []error {
	want := tableRoutes(p.rules, mainRoutes, k.opts.RouteTableBase, k.opts.ExcludeSNAT)
	failedRoutes, errs := k.syncTables(adm, want)
	failedRules, ruleErrs := k.syncRules(adm, p.rules)
	errs = append(errs, ruleErrs...)
	for _, t := range slices.Concat(p.added, p.updated, p.unchanged) {
		table := k.opts.RouteTableBase + t.link.Index
		fam := unix.AF_INET
		if t.Address.Is6() {
			fam = unix.AF_INET6
		}
		for k, err := range failedRoutes {
			if k.table == table && k.family == fam {
				p.fail(t.Address, err)
			}
		}
		if err := failedRules[ruleSpec{Pod: t.PodIP, Table: table}]; err != nil {
			p.fail(t.Address, err)
		}
	}
	return errs
}
