package ip

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/ipam"
)

// checkPoolOverlap refuses a pool whose spec.addresses overlap another
// IPPool's, naming each other pool and the ranges of it that overlap. Entries
// that are not CIDRs are left to the CRD's CEL rules.
func checkPoolOverlap(pool *ipv1.IPPool, others []ipv1.IPPool) error {
	mine := prefixes(pool.Spec.Addresses)
	others = slices.Clone(others)
	slices.SortFunc(others, func(a, b ipv1.IPPool) int { return strings.Compare(a.Name, b.Name) })
	var problems []string
	for _, a := range mine {
		for _, other := range others {
			if other.Name == pool.Name {
				continue
			}
			var hit []string
			for _, b := range prefixes(other.Spec.Addresses) {
				if a.Overlaps(b) {
					hit = append(hit, b.String())
				}
			}
			if len(hit) > 0 {
				problems = append(problems, fmt.Sprintf("%s overlaps IPPool %q (%s)", a, other.Name, strings.Join(hit, ", ")))
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("spec.addresses: %s; an address can belong to one pool only", strings.Join(problems, ", "))
}

// prefixes parses the entries of spec.addresses that are CIDRs.
func prefixes(addresses []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range addresses {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// checkIPAddress refuses an IP whose spec.address its pool cannot hand out:
// the pool named in spec.pool does not contain it or never hands it out
// (a network, broadcast or subnet-router anycast address), or, without
// spec.pool, no pool contains it. These are the AddressOutsidePool and
// PoolNotFound conditions the IP controller would report, said at once.
//
// A spec.pool that does not exist (yet) is allowed: pools and IPs are often
// applied together in any order, and the controller waits for the pool,
// reporting PoolNotFound meanwhile. A pool whose spec cannot be parsed is
// left to that pool's own InvalidSpec condition.
func checkIPAddress(ip *ipv1.IP, pools []ipv1.IPPool) error {
	if ip.Spec.Address == "" {
		return nil
	}
	addr, err := ipam.Canonical(ip.Spec.Address)
	if err != nil {
		return nil //nolint:nilerr // the CRD's CEL rule refuses it with its own message
	}
	for i := range pools {
		p := &pools[i]
		if ip.Spec.Pool != "" && p.Name != ip.Spec.Pool {
			continue
		}
		pool, err := ipam.NewPool(p.Spec.Addresses, p.Spec.Reserved)
		if err != nil {
			if ip.Spec.Pool != "" {
				return nil
			}
			continue
		}
		if !pool.Contains(addr) {
			if ip.Spec.Pool != "" {
				return fmt.Errorf("spec.address: %s is not in IPPool %q (%s)", addr, p.Name, pool)
			}
			continue
		}
		if err := pool.CanRequest(addr); err != nil {
			return fmt.Errorf("spec.address: %v (IPPool %q), which no IP can hold; name another address", err, p.Name)
		}
		return nil
	}
	if ip.Spec.Pool != "" {
		return nil // not created yet: the controller waits for it
	}
	return fmt.Errorf("spec.address: %s is in no IPPool; create one that contains it or name one in spec.pool", addr)
}
