package ipagent

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/witness"
)

// Witnesses is the agent's end of the witness protocol
// (internal/witnessnet.Peer): what its witnesses vouch for, in its current
// generation.
type Witnesses interface {
	Gen() witness.Gen
	HeldUntil(witnesses []string) time.Time
	SetWitnesses(map[string]netip.AddrPort)
}

// WitnessConfig lets the agent hold the IPs whose status names witnesses
// (pools with failover Witness) on its witnesses' word rather than on its
// heartbeat Lease.
type WitnessConfig struct {
	Peer Witnesses
	// Port is the UDP port every agent's peer listens on.
	Port uint16
	// Nodes reads other nodes' addresses (the API server: the agent's
	// cache holds its own Node only).
	Nodes client.Reader
}

// holdRule is the rule this node would hold ip under: its generation on
// its witnesses' word when ip names witnesses and the agent takes part in
// the protocol, else 0 on its heartbeat Lease; and whether it may hold it
// now. Each hold records its rule (attachedGeneration), and the
// controller judges it by that rule only.
func (r *Reconciler) holdRule(ip *ipv1.IP, leaseHeld bool, now time.Time) (gen int64, may bool) {
	if r.Witness == nil || len(ip.Status.Witnesses) == 0 {
		return 0, leaseHeld
	}
	return int64(r.Witness.Peer.Gen()), r.Witness.Peer.HeldUntil(ip.Status.Witnesses).After(now)
}

// probeWitnesses makes the peer probe the witnesses of every IP placed
// here, before it claims them: the claim waits for a quorum.
func (r *Reconciler) probeWitnesses(ctx context.Context, ips []*ipv1.IP) {
	if r.Witness == nil {
		return
	}
	want := map[string]netip.AddrPort{}
	for _, ip := range ips {
		if ip.Status.Node != r.Node && ip.Status.AttachedNode != r.Node {
			continue
		}
		for _, w := range ip.Status.Witnesses {
			if a, err := r.nodeAddr(ctx, w); err == nil {
				want[w] = netip.AddrPortFrom(a, r.Witness.Port)
			}
		}
	}
	r.Witness.Peer.SetWitnesses(want)
}

// nodeAddr is a node's internal address, read once and remembered: a
// node's address does not change while it is a node, and a witness must
// stay reachable while the API server is not.
func (r *Reconciler) nodeAddr(ctx context.Context, name string) (netip.Addr, error) {
	if a, ok := r.addrs.Load(name); ok {
		return a.(netip.Addr), nil
	}
	n := &corev1.Node{}
	if err := r.Witness.Nodes.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
		return netip.Addr{}, fmt.Errorf("reading the address of witness %s: %w", name, err)
	}
	for _, kind := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == kind {
				r.addrs.Store(name, ip)
				return ip, nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("witness %s has no internal address", name)
}

// recordHolds notes what this pass holds, and by which rule, under mu
// (see LeaseLost and HoldDeadline). It returns whether the Lease is still
// held when some hold depends on it: if not, the caller drops those holds.
func (r *Reconciler) recordHolds(onLease bool, sets [][]string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leaseHolds, r.witnessSets = onLease, sets
	return !onLease || r.Lease.Held()
}

// LeaseLost is called when the heartbeat hold lapses. A node whose holds
// are all on its witnesses' word keeps answering (a stalled API server
// must not silence it); any hold on the Lease means fencing, as ever.
func (r *Reconciler) LeaseLost() {
	r.mu.Lock()
	fence := r.Witness == nil || r.leaseHolds
	r.mu.Unlock()
	if fence {
		r.Fence()
		return
	}
	r.poke()
}

// WitnessesLost is called when a witness says this node's generation was
// declared silent: the controller may move every address it held in that
// generation, so the node stops answering for all of them at once, then
// starts a new generation (restart) and claims again.
func (r *Reconciler) WitnessesLost(restart func() error) error {
	r.Fence()
	err := restart()
	r.Dataplane.Unfence()
	r.poke()
	return err
}

// HoldDeadline is the latest time the node may answer for anything it
// holds: the end of the Lease hold (leaseEnd) when some hold depends on
// it, and for each set of witnesses, the end of what they vouched for.
// The data plane never programs anything to outlive it.
func (r *Reconciler) HoldDeadline(leaseEnd time.Time, slack time.Duration) time.Time {
	r.mu.Lock()
	onLease, sets := r.leaseHolds, r.witnessSets
	r.mu.Unlock()
	if r.Witness == nil || len(sets) == 0 {
		return leaseEnd
	}
	var d time.Time
	if onLease {
		d = leaseEnd
	}
	for _, ws := range sets {
		u := r.Witness.Peer.HeldUntil(ws)
		if u.IsZero() {
			return time.Time{}
		}
		if u = u.Add(slack); d.IsZero() || u.Before(d) {
			d = u
		}
	}
	return d
}

// HoldsOnWitnesses reports whether the node holds anything on its
// witnesses' word (the data plane is then refreshed as they vouch).
func (r *Reconciler) HoldsOnWitnesses() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.witnessSets) > 0
}
