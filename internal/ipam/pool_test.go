package ipam

import (
	"math"
	"net/netip"
	"strings"
	"testing"
)

func TestNewPoolErrors(t *testing.T) {
	tests := map[string]struct {
		addresses, reserved []string
		want                string
	}{
		"no addresses":       {want: "a pool needs at least one CIDR in spec.addresses"},
		"prefix too long":    {addresses: []string{"192.0.2.0/33"}, want: `"192.0.2.0/33" is not a CIDR`},
		"bare address":       {addresses: []string{"192.0.2.1"}, want: `"192.0.2.1" is not a CIDR`},
		"host bits":          {addresses: []string{"192.0.2.1/24"}, want: `"192.0.2.1/24" has bits set after the prefix length; did you mean 192.0.2.0/24?`},
		"ipv4-mapped":        {addresses: []string{"::ffff:192.0.2.0/120"}, want: `"::ffff:192.0.2.0/120" is an IPv4-mapped IPv6 prefix; write it as IPv4`},
		"overlap":            {addresses: []string{"10.0.0.0/16", "10.0.1.0/24"}, want: `"10.0.1.0/24" overlaps "10.0.0.0/16"`},
		"reserved garbage":   {addresses: []string{"10.0.0.0/16"}, reserved: []string{"gateway"}, want: `"gateway" is not an IP address or CIDR`},
		"reserved zone":      {addresses: []string{"fd00::/64"}, reserved: []string{"fd00::1%eth0"}, want: `"fd00::1%eth0" is not an IP address or CIDR`},
		"reserved host bits": {addresses: []string{"10.0.0.0/16"}, reserved: []string{"10.0.0.1/24"}, want: `"10.0.0.1/24" has bits set after the prefix length`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := NewPool(tc.addresses, tc.reserved)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("NewPool() error = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestPoolSize(t *testing.T) {
	tests := map[string]struct {
		addresses, reserved []string
		want                uint64
	}{
		"ipv4 /24 loses network and broadcast": {addresses: []string{"192.0.2.0/24"}, want: 254},
		"ipv4 /30":                             {addresses: []string{"192.0.2.0/30"}, want: 2},
		"ipv4 /31 keeps both":                  {addresses: []string{"192.0.2.0/31"}, want: 2},
		"ipv4 /32":                             {addresses: []string{"192.0.2.7/32"}, want: 1},
		"ipv6 /120 loses the anycast address":  {addresses: []string{"2001:db8::/120"}, want: 255},
		"ipv6 /127 keeps both":                 {addresses: []string{"2001:db8::/127"}, want: 2},
		"ipv6 /128":                            {addresses: []string{"2001:db8::1/128"}, want: 1},
		"dual stack":                           {addresses: []string{"2001:db8::/120", "192.0.2.0/24"}, want: 509},
		"reserved address and cidr": {
			addresses: []string{"192.0.2.0/24"},
			reserved:  []string{"192.0.2.1", "192.0.2.16/28", "192.0.2.20", "198.51.100.1"},
			want:      254 - 1 - 16,
		},
		"reserved covers network address": {addresses: []string{"192.0.2.0/24"}, reserved: []string{"192.0.2.0/30"}, want: 254 - 3},
		"everything reserved":             {addresses: []string{"192.0.2.0/24"}, reserved: []string{"192.0.2.0/24"}, want: 0},
		"ipv4 /0":                         {addresses: []string{"0.0.0.0/0"}, want: 1<<32 - 2},
		"ipv6 /65":                        {addresses: []string{"2001:db8::/65"}, want: 1<<63 - 1},
		"ipv6 /64 is one too many":        {addresses: []string{"2001:db8::/64"}, want: math.MaxUint64},
		"ipv6 /63 saturates":              {addresses: []string{"2001:db8::/63"}, want: math.MaxUint64},
		"two ipv6 /65 overflow the sum":   {addresses: []string{"2001:db8::/65", "2001:db8:1::/65", "2001:db8:2::/65"}, want: math.MaxUint64},
		"ipv6 /0":                         {addresses: []string{"::/0"}, want: math.MaxUint64},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := NewPool(tc.addresses, tc.reserved)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Size(); got != tc.want {
				t.Errorf("Size() = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestPoolNext(t *testing.T) {
	tests := map[string]struct {
		addresses, reserved []string
		used                []string
		want                string // "" for exhausted
	}{
		"lowest address after the network address": {addresses: []string{"192.0.2.0/24"}, want: "192.0.2.1"},
		"skips used":                      {addresses: []string{"192.0.2.0/24"}, used: []string{"192.0.2.1", "192.0.2.2"}, want: "192.0.2.3"},
		"skips reserved":                  {addresses: []string{"192.0.2.0/24"}, reserved: []string{"192.0.2.0/28"}, want: "192.0.2.16"},
		"never the broadcast address":     {addresses: []string{"192.0.2.0/30"}, used: []string{"192.0.2.1", "192.0.2.2"}},
		"/31 hands out its first address": {addresses: []string{"192.0.2.0/31"}, want: "192.0.2.0"},
		"ipv4 ranges before ipv6":         {addresses: []string{"2001:db8::/120", "192.0.2.0/30"}, want: "192.0.2.1"},
		"moves on to the next range":      {addresses: []string{"192.0.2.0/30", "2001:db8::/120"}, used: []string{"192.0.2.1", "192.0.2.2"}, want: "2001:db8::1"},
		"ipv6 skips the anycast address":  {addresses: []string{"2001:db8::/64"}, want: "2001:db8::1"},
		"ipv6 /128":                       {addresses: []string{"2001:db8::5/128"}, want: "2001:db8::5"},
		"top of the address space":        {addresses: []string{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127"}, used: []string{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"}, want: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
		"top of the address space, all used": {
			addresses: []string{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127"},
			used:      []string{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
		},
		"everything reserved": {addresses: []string{"192.0.2.0/24"}, reserved: []string{"192.0.2.0/24"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := NewPool(tc.addresses, tc.reserved)
			if err != nil {
				t.Fatal(err)
			}
			used := map[netip.Addr]bool{}
			for _, s := range tc.used {
				used[netip.MustParseAddr(s)] = true
			}
			got, ok := p.Next(func(a netip.Addr) bool { return used[a] })
			switch {
			case tc.want == "" && ok:
				t.Errorf("Next() = %s, want exhausted", got)
			case tc.want != "" && (!ok || got.String() != tc.want):
				t.Errorf("Next() = %s, %t; want %s", got, ok, tc.want)
			}
		})
	}
}

func TestPoolNextScanLimit(t *testing.T) {
	p, err := NewPool([]string{"2001:db8::/64"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	if a, ok := p.Next(func(netip.Addr) bool { calls++; return true }); ok {
		t.Errorf("Next() = %s with everything used", a)
	}
	if calls != ScanLimit {
		t.Errorf("Next() asked about %d addresses, want ScanLimit (%d)", calls, ScanLimit)
	}
}

// A /16 with the lowest 60,000 addresses taken is the largest realistic scan.
func BenchmarkPoolNext(b *testing.B) {
	p, err := NewPool([]string{"10.0.0.0/16"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	used := map[netip.Addr]bool{}
	a := netip.MustParseAddr("10.0.0.1")
	for range 60000 {
		used[a] = true
		a = a.Next()
	}
	for b.Loop() {
		if _, ok := p.Next(func(a netip.Addr) bool { return used[a] }); !ok {
			b.Fatal("exhausted")
		}
	}
}

func TestPoolMembership(t *testing.T) {
	p, err := NewPool([]string{"192.0.2.0/24", "2001:db8::/120", "198.51.100.7/32"}, []string{"192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		addr       string
		contains   bool
		canRequest string // expected error, "" for nil
		automatic  bool
	}{
		"ordinary address":  {addr: "192.0.2.10", contains: true, automatic: true},
		"reserved address":  {addr: "192.0.2.1", contains: true},
		"network address":   {addr: "192.0.2.0", contains: true, canRequest: "192.0.2.0 is the network address of 192.0.2.0/24"},
		"broadcast address": {addr: "192.0.2.255", contains: true, canRequest: "192.0.2.255 is the broadcast address of 192.0.2.0/24"},
		"ipv6 anycast":      {addr: "2001:db8::", contains: true, canRequest: "2001:db8:: is the subnet-router anycast address of 2001:db8::/120"},
		"ipv6 ordinary":     {addr: "2001:db8::ff", contains: true, automatic: true},
		"/32":               {addr: "198.51.100.7", contains: true, automatic: true},
		"outside":           {addr: "203.0.113.1", canRequest: "203.0.113.1 is outside the pool's addresses (192.0.2.0/24, 198.51.100.7/32, 2001:db8::/120)"},
		"ipv4-mapped":       {addr: "::ffff:192.0.2.10", canRequest: "::ffff:192.0.2.10 is outside the pool's addresses"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := netip.MustParseAddr(tc.addr)
			if got := p.Contains(a); got != tc.contains {
				t.Errorf("Contains() = %t, want %t", got, tc.contains)
			}
			err := p.CanRequest(a)
			if (err == nil) != (tc.canRequest == "") || err != nil && !strings.HasPrefix(err.Error(), tc.canRequest) {
				t.Errorf("CanRequest() = %v, want %q", err, tc.canRequest)
			}
			if got := p.Automatic(a); got != tc.automatic {
				t.Errorf("Automatic() = %t, want %t", got, tc.automatic)
			}
		})
	}
}

func TestPoolOverlaps(t *testing.T) {
	tests := map[string]struct {
		a, b []string
		want bool
	}{
		"disjoint":               {a: []string{"192.0.2.0/25"}, b: []string{"192.0.2.128/25"}, want: false},
		"nested":                 {a: []string{"192.0.2.0/24"}, b: []string{"192.0.2.128/25"}, want: true},
		"one of several":         {a: []string{"10.0.0.0/8", "2001:db8::/64"}, b: []string{"2001:db8::1/128"}, want: true},
		"other families":         {a: []string{"0.0.0.0/0"}, b: []string{"::/0"}, want: false},
		"same range":             {a: []string{"192.0.2.0/24"}, b: []string{"192.0.2.0/24"}, want: true},
		"network address counts": {a: []string{"192.0.2.0/24"}, b: []string{"192.0.2.0/32"}, want: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a, err := NewPool(tc.a, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := NewPool(tc.b, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := a.Overlaps(b); got != tc.want {
				t.Errorf("a.Overlaps(b) = %t, want %t", got, tc.want)
			}
			if got := b.Overlaps(a); got != tc.want {
				t.Errorf("b.Overlaps(a) = %t, want %t", got, tc.want)
			}
		})
	}
}

// FuzzPoolNext compares Next, Size and Automatic with a brute-force walk of
// every address of small pools, and checks Next's answer on large ones.
func FuzzPoolNext(f *testing.F) {
	f.Add("192.0.2.0/24", "192.0.2.1,192.0.2.16/28", uint64(0xff))
	f.Add("192.0.2.0/30,2001:db8::/125", "", uint64(0b0110))
	f.Add("192.0.2.0/31,198.51.100.7/32", "198.51.100.7", uint64(1))
	f.Add("2001:db8::/120", "2001:db8::/124", ^uint64(0)>>1)
	f.Add("10.0.0.0/8", "10.0.0.0/9", uint64(0))
	f.Add("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00/120", "", ^uint64(0))
	f.Fuzz(func(t *testing.T, addresses, reserved string, usedMask uint64) {
		p, err := NewPool(split(addresses), split(reserved))
		if err != nil {
			return
		}
		used := func(a netip.Addr) bool {
			b := a.AsSlice()
			return usedMask>>(b[len(b)-1]%64)&1 == 1
		}
		got, ok := p.Next(used)
		if ok && (used(got) || !p.Automatic(got) || !p.Contains(got) || p.CanRequest(got) != nil) {
			t.Fatalf("Next() = %s: used %t, Automatic %t, Contains %t, CanRequest %v",
				got, used(got), p.Automatic(got), p.Contains(got), p.CanRequest(got))
		}

		var total int
		for _, prefix := range p.prefixes {
			total += 1 << (prefix.Addr().BitLen() - prefix.Bits())
			if prefix.Addr().BitLen()-prefix.Bits() > 12 || total > 1<<14 {
				return // too large to walk
			}
		}
		var size uint64
		var want netip.Addr
		for _, prefix := range p.prefixes {
			for a := prefix.Addr(); prefix.Contains(a); a = a.Next() {
				candidate := !skipped(prefix, a) && !isReserved(split(reserved), a)
				if p.Automatic(a) != candidate {
					t.Fatalf("Automatic(%s) = %t, want %t", a, !candidate, candidate)
				}
				if !candidate {
					continue
				}
				size++
				if !want.IsValid() && !used(a) {
					want = a
				}
			}
		}
		if p.Size() != size {
			t.Errorf("Size() = %d, want %d", p.Size(), size)
		}
		if ok != want.IsValid() || got != want {
			t.Errorf("Next() = %s, %t; want %s", got, ok, want)
		}
	})
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// skipped is the brute-force rule for the addresses no pool hands out.
func skipped(prefix netip.Prefix, a netip.Addr) bool {
	first := a == prefix.Addr()
	last := !a.Next().IsValid() || !prefix.Contains(a.Next())
	if a.Is4() {
		return prefix.Bits() < 31 && (first || last)
	}
	return prefix.Bits() < 127 && first
}

// isReserved is the brute-force rule for spec.reserved.
func isReserved(reserved []string, a netip.Addr) bool {
	for _, r := range reserved {
		if prefix, err := netip.ParsePrefix(r); err == nil && prefix.Contains(a) {
			return true
		}
		if addr, err := netip.ParseAddr(r); err == nil && addr == a {
			return true
		}
	}
	return false
}
