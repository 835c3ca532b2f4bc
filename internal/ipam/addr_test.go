package ipam

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestCanonical(t *testing.T) {
	tests := map[string]struct {
		in, want, err string
	}{
		"ipv4":                 {in: "192.0.2.10", want: "192.0.2.10"},
		"ipv6 upper case":      {in: "2001:DB8::A", want: "2001:db8::a"},
		"ipv6 long form":       {in: "2001:0db8:0000:0000:0000:0000:0000:0001", want: "2001:db8::1"},
		"ipv6 embedded ipv4":   {in: "64:ff9b::192.0.2.1", want: "64:ff9b::c000:201"},
		"ipv4 leading zero":    {in: "192.0.2.010", err: `"192.0.2.010" is not an IP address`},
		"cidr":                 {in: "192.0.2.0/24", err: `"192.0.2.0/24" is not an IP address`},
		"empty":                {in: "", err: `"" is not an IP address`},
		"zone":                 {in: "fe80::1%eth0", err: `"fe80::1%eth0" has a zone; an address without %eth0 is needed`},
		"ipv4-mapped":          {in: "::ffff:192.0.2.1", err: `"::ffff:192.0.2.1" is an IPv4-mapped IPv6 address; write it as 192.0.2.1`},
		"surrounding spaces":   {in: " 192.0.2.10", err: `" 192.0.2.10" is not an IP address`},
		"ipv4-compatible ipv6": {in: "::192.0.2.1", want: "::c000:201"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Canonical(tc.in)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Errorf("Canonical(%q) error = %v, want %q", tc.in, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Canonical(%q): %v", tc.in, err)
			}
			if Name(got) != tc.want {
				t.Errorf("Name(Canonical(%q)) = %q, want %q", tc.in, Name(got), tc.want)
			}
		})
	}
}

// FuzzCanonical checks that every address Canonical accepts names a valid
// IPAddress object, and that it accepts every address the API server does.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{"192.0.2.10", "2001:DB8::A", "::ffff:1.2.3.4", "fe80::1%eth0", "1.2.3.04", "::", "0.0.0.0", "64:ff9b::1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		addr, err := Canonical(s)
		if err != nil {
			if strings.Contains(err.Error(), "%!") {
				t.Errorf("badly formatted error: %v", err)
			}
			if a, perr := netip.ParseAddr(s); perr == nil && a.Zone() == "" && !a.Is4In6() {
				t.Errorf("Canonical(%q) refused an address the API server accepts: %v", s, err)
			}
			return
		}
		name := Name(addr)
		if errs := validation.IsValidIP(field.NewPath("metadata", "name"), name); len(errs) > 0 {
			t.Errorf("Name(Canonical(%q)) = %q is not a valid IPAddress name: %v", s, name, errs.ToAggregate())
		}
		again, err := Canonical(name)
		if err != nil || again != addr {
			t.Errorf("Canonical(%q) = %v, %v; want %v", name, again, err, addr)
		}
	})
}
