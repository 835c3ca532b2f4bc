package ipam

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"slices"
	"strings"
)

// ScanLimit is the most candidate addresses Next examines. Next walks the
// pool from its lowest address, so a pool whose first million free-range
// addresses are all in use reports exhaustion even if it has more; this keeps
// a huge IPv6 range from turning an allocation into an endless scan.
const ScanLimit = 1 << 20

// Pool is the parsed form of an IPPool's addresses and reserved list.
type Pool struct {
	prefixes []netip.Prefix // spec.addresses, sorted
	free     []span         // what Next hands out: prefixes minus skipped and reserved addresses, sorted
}

// span is an inclusive range of addresses of one family.
type span struct {
	first, last netip.Addr
}

// NewPool parses an IPPool's spec.addresses (CIDRs) and spec.reserved
// (addresses or CIDRs). The errors name the offending entry and say what is
// wrong with it, for a condition message.
func NewPool(addresses, reserved []string) (*Pool, error) {
	if len(addresses) == 0 {
		return nil, errors.New("a pool needs at least one CIDR in spec.addresses")
	}
	p := &Pool{}
	for _, s := range addresses {
		prefix, err := parsePrefix(s)
		if err != nil {
			return nil, err
		}
		for _, other := range p.prefixes {
			if prefix.Overlaps(other) {
				return nil, fmt.Errorf("%q overlaps %q", s, other)
			}
		}
		p.prefixes = append(p.prefixes, prefix)
	}
	slices.SortFunc(p.prefixes, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })

	var cut []span
	for _, s := range reserved {
		r, err := parseReserved(s)
		if err != nil {
			return nil, err
		}
		cut = append(cut, r)
	}
	for _, prefix := range p.prefixes {
		if s, ok := assignable(prefix); ok {
			p.free = append(p.free, s)
		}
	}
	p.free = subtract(p.free, merge(cut))
	return p, nil
}

// parsePrefix parses one entry of spec.addresses.
func parsePrefix(s string) (netip.Prefix, error) {
	prefix, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR", s)
	}
	if prefix.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q is an IPv4-mapped IPv6 prefix; write it as IPv4", s)
	}
	if prefix.Masked() != prefix {
		return netip.Prefix{}, fmt.Errorf("%q has bits set after the prefix length; did you mean %s?", s, prefix.Masked())
	}
	return prefix, nil
}

// parseReserved parses one entry of spec.reserved, an address or a CIDR.
func parseReserved(s string) (span, error) {
	if strings.Contains(s, "/") {
		prefix, err := parsePrefix(s)
		if err != nil {
			return span{}, err
		}
		return span{prefix.Addr(), lastAddr(prefix)}, nil
	}
	addr, err := Canonical(s)
	if err != nil {
		return span{}, fmt.Errorf("%q is not an IP address or CIDR", s)
	}
	return span{addr, addr}, nil
}

// assignable is the part of prefix that can ever be handed out: IPv4
// prefixes shorter than /31 lose their network and broadcast addresses,
// IPv6 prefixes shorter than /127 their subnet-router anycast address
// (RFC 4291 §2.6.1), which routers on the link answer.
func assignable(prefix netip.Prefix) (span, bool) {
	s := span{prefix.Addr(), lastAddr(prefix)}
	switch {
	case s.first.Is4() && prefix.Bits() < 31:
		s.first, s.last = s.first.Next(), s.last.Prev()
	case s.first.Is6() && prefix.Bits() < 127:
		s.first = s.first.Next()
	}
	return s, s.first.Compare(s.last) <= 0
}

// lastAddr is the highest address of prefix, which must be masked.
func lastAddr(prefix netip.Prefix) netip.Addr {
	b := prefix.Addr().AsSlice()
	for i := prefix.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	addr, _ := netip.AddrFromSlice(b)
	return addr
}

// merge sorts spans and joins the overlapping ones.
func merge(spans []span) []span {
	slices.SortFunc(spans, func(a, b span) int { return a.first.Compare(b.first) })
	var out []span
	for _, s := range spans {
		if n := len(out); n > 0 && s.first.Compare(out[n-1].last) <= 0 {
			if s.last.Compare(out[n-1].last) > 0 {
				out[n-1].last = s.last
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// subtract removes the addresses in cut from spans; both are sorted and
// each has no overlaps of its own.
func subtract(spans, cut []span) []span {
	var out []span
	for _, s := range spans {
		cur, whole := s.first, true
		for _, c := range cut {
			if c.last.Compare(cur) < 0 {
				continue
			}
			if c.first.Compare(s.last) > 0 {
				break
			}
			if c.first.Compare(cur) > 0 {
				out = append(out, span{cur, c.first.Prev()})
			}
			if c.last.Compare(s.last) >= 0 {
				whole = false
				break
			}
			cur = c.last.Next()
		}
		if whole {
			out = append(out, span{cur, s.last})
		}
	}
	return out
}

// Contains reports whether addr lies in one of the pool's CIDRs, including
// its reserved, network and broadcast addresses. It tells which pool an
// address belongs to.
func (p *Pool) Contains(addr netip.Addr) bool {
	return p.prefixOf(addr).IsValid()
}

func (p *Pool) prefixOf(addr netip.Addr) netip.Prefix {
	for _, prefix := range p.prefixes {
		if prefix.Contains(addr) {
			return prefix
		}
	}
	return netip.Prefix{}
}

// CanRequest returns nil when an IP may name addr in its spec.address: addr
// lies in one of the pool's CIDRs and is not a network, broadcast or
// subnet-router anycast address. Reserved addresses may be requested; the
// error says why addr may not.
func (p *Pool) CanRequest(addr netip.Addr) error {
	prefix := p.prefixOf(addr)
	if !prefix.IsValid() {
		return fmt.Errorf("%s is outside the pool's addresses (%s)", addr, p)
	}
	switch {
	case addr.Is4() && prefix.Bits() < 31 && addr == prefix.Addr():
		return fmt.Errorf("%s is the network address of %s", addr, prefix)
	case addr.Is4() && prefix.Bits() < 31 && addr == lastAddr(prefix):
		return fmt.Errorf("%s is the broadcast address of %s", addr, prefix)
	case addr.Is6() && prefix.Bits() < 127 && addr == prefix.Addr():
		return fmt.Errorf("%s is the subnet-router anycast address of %s", addr, prefix)
	}
	return nil
}

// Automatic reports whether Next may hand out addr: it is in the pool, not
// reserved, and not a network, broadcast or subnet-router anycast address.
// An IPPool's available count is Size less the allocated addresses for which
// Automatic is true.
func (p *Pool) Automatic(addr netip.Addr) bool {
	_, found := slices.BinarySearchFunc(p.free, addr, func(s span, a netip.Addr) int {
		if s.last.Compare(a) < 0 {
			return -1
		}
		if s.first.Compare(a) > 0 {
			return 1
		}
		return 0
	})
	return found
}

// Size is the number of addresses Next may hand out, saturating at
// math.MaxUint64 for huge IPv6 ranges.
func (p *Pool) Size() uint64 {
	var total uint64
	for _, s := range p.free {
		hi, lo := sub128(toU128(s.last), toU128(s.first))
		if hi != 0 || lo == math.MaxUint64 {
			return math.MaxUint64
		}
		var carry uint64
		total, carry = bits.Add64(total, lo+1, 0)
		if carry != 0 {
			return math.MaxUint64
		}
	}
	return total
}

// toU128 is addr as a 128-bit number (IPv4 addresses in the low 32 bits).
func toU128(addr netip.Addr) [2]uint64 {
	if addr.Is4() {
		b := addr.As4()
		return [2]uint64{0, uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := addr.As16()
	return [2]uint64{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// sub128 is a-b for a >= b, as high and low words.
func sub128(a, b [2]uint64) (hi, lo uint64) {
	lo, borrow := bits.Sub64(a[1], b[1], 0)
	hi, _ = bits.Sub64(a[0], b[0], borrow)
	return hi, lo
}

// Next returns the lowest address the pool may hand out for which used
// reports false, and false when there is none (or none among the first
// ScanLimit candidates).
func (p *Pool) Next(used func(netip.Addr) bool) (netip.Addr, bool) {
	scanned := 0
	for _, s := range p.free {
		for a := s.first; ; a = a.Next() {
			if !used(a) {
				return a, true
			}
			if scanned++; scanned >= ScanLimit {
				return netip.Addr{}, false
			}
			if a == s.last {
				break
			}
		}
	}
	return netip.Addr{}, false
}

// Overlaps reports whether the two pools share any address. Overlapping pools
// are refused, because an IP naming only an address could not tell which
// pool it belongs to.
func (p *Pool) Overlaps(other *Pool) bool {
	for _, a := range p.prefixes {
		for _, b := range other.prefixes {
			if a.Overlaps(b) {
				return true
			}
		}
	}
	return false
}

// String lists the pool's CIDRs, comma-separated.
func (p *Pool) String() string {
	s := make([]string, len(p.prefixes))
	for i, prefix := range p.prefixes {
		s[i] = prefix.String()
	}
	return strings.Join(s, ", ")
}
