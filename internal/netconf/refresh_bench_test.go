package netconf

import (
	"testing"
	"time"
)

// BenchmarkRefresh is one refresh of a holder's data plane as the ip-agent
// makes them while its witnesses vouch: two static IPs with their NAT,
// address lifetimes and the hold gate (root: the test's own network
// namespaces). Refresh rewrites all of it; RefreshGate, made on the vouches
// in between, the gate alone.
//
//	go test -run '^$' -bench Refresh ./internal/netconf/
func BenchmarkRefresh(b *testing.B) {
	topo := newTopology(b)
	d := newDataplane(b, topo, func(o *Options) {
		o.AddressLifetime = time.Second
		o.HoldDeadline = func() time.Time { return time.Now().Add(1800 * time.Millisecond) }
		o.GateDeadline = func() time.Time { return time.Now().Add(300 * time.Millisecond) }
	})
	apply(b, d, Assignment{Address: staticV4, PodIP: podV4}, Assignment{Address: staticV4b, PodIP: podV4b})
	for name, refresh := range map[string]func() error{"Refresh": d.Refresh, "RefreshGate": d.RefreshGate} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := refresh(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
