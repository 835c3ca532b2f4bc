// Package ipam is the address logic behind the IP and IPPool kinds, with no
// Kubernetes client: it parses pools, picks the lowest free address, names the
// objects that reserve addresses, and chooses which claiming pod holds an IP.
package ipam

import (
	"fmt"
	"net/netip"
)

// Canonical parses an IP address written in any form net/netip accepts and
// returns it; its String method gives the canonical form (lower-case,
// shortest IPv6). Zones (fe80::1%eth0) and IPv4-mapped IPv6 addresses
// (::ffff:192.0.2.1) are refused, as the Kubernetes API refuses them.
func Canonical(s string) (netip.Addr, error) {
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	if addr.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q has a zone; an address without %%%s is needed", s, addr.Zone())
	}
	if addr.Is4In6() {
		return netip.Addr{}, fmt.Errorf("%q is an IPv4-mapped IPv6 address; write it as %s", s, addr.Unmap())
	}
	return addr, nil
}

// Name is the name of the networking.k8s.io/v1 IPAddress object that reserves
// addr. The API server requires IPAddress names to be addresses in canonical
// form, without zone and not IPv4-mapped, so addr must come from Canonical or
// a Pool.
func Name(addr netip.Addr) string {
	return addr.String()
}
