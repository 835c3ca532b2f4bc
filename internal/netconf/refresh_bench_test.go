package netconf

import (
	"testing"
	"time"
)

// BenchmarkRefresh is one refresh of a holder's data plane as the ip-agent
// makes it on every witness vouch: two static IPs with their NAT, address
// lifetimes and the hold gate (root: the test's own network namespaces).
//
//	go test -run '^$' -bench Refresh ./internal/netconf/
func BenchmarkRefresh(b *testing.B) {
	topo := newTopology(b)
	deadline := func() time.Time { return time.Now().Add(300 * time.Millisecond) }
	d := newDataplane(b, topo, func(o *Options) {
		o.AddressLifetime = time.Second
		o.HoldDeadline = func() time.Time { return time.Now().Add(1800 * time.Millisecond) }
		o.GateDeadline = deadline
	})
	apply(b, d, Assignment{Address: staticV4, PodIP: podV4}, Assignment{Address: staticV4b, PodIP: podV4b})
	for b.Loop() {
		if err := d.Refresh(); err != nil {
			b.Fatal(err)
		}
	}
}
