package ipagent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/netconf"
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
	// Nodes reads other nodes' addresses from the API server (the agent's
	// informer holds its own Node only): agentkube.Client.
	Nodes interface {
		Get(ctx context.Context, namespace, name string, obj runtime.Object) error
	}
	// Fallback is how long an IP placed here waits for its witnesses to
	// vouch before the node holds it on its Lease instead (the witness
	// port filtered, the witnesses' agents down): default 3 s.
	Fallback time.Duration
}

// fallbackAfter is WitnessConfig.Fallback with its default.
func (c *WitnessConfig) fallbackAfter() time.Duration {
	if c.Fallback > 0 {
		return c.Fallback
	}
	return 3 * time.Second
}

// holdRule is the rule this node would hold ip under: its generation on
// its witnesses' word when ip names witnesses and the agent takes part in
// the protocol, else 0 on its heartbeat Lease; and whether it may hold it
// now. Each hold records its rule (attachedGeneration), and the
// controller judges it by that rule only.
//
// When the witnesses do not vouch within the fallback time, the node
// holds the IP on its Lease (and keeps that rule until it lets go): a
// filtered witness port must not keep an address dark for ever. A hold
// already on the Lease because the IP had no witnesses when it began (no
// other node was eligible) moves to their word once the controller names
// some and they vouch (see convertHold); until then, and for good if they
// do not vouch within the fallback time, it stays on the Lease.
func (r *Reconciler) holdRule(ip *ipv1.IP, leaseHeld bool, now time.Time) (gen int64, may bool) {
	if r.Witness == nil || len(ip.Status.Witnesses) == 0 {
		return 0, leaseHeld
	}
	onLease := ip.Status.AttachedNode == r.Node && ip.Status.AttachedGeneration == 0
	if _, fell := r.fellBack.Load(ip.UID); onLease && fell {
		return 0, leaseHeld // no flapping
	}
	if r.Witness.Peer.HeldUntil(ip.Status.Witnesses).After(now) {
		r.waiting.Delete(ip.UID)
		return int64(r.Witness.Peer.Gen()), true
	}
	w, _ := r.waiting.LoadOrStore(ip.UID, awaited{since: now, witnesses: ip.Status.Witnesses})
	if now.Sub(w.(awaited).since) < r.Witness.fallbackAfter() {
		if onLease {
			return 0, leaseHeld
		}
		return int64(r.Witness.Peer.Gen()), false
	}
	r.waiting.Delete(ip.UID)
	r.fellBack.Store(ip.UID, true)
	if _, told := r.warned.LoadOrStore("fallback/"+string(ip.UID), true); !told {
		r.Recorder.Eventf(ip, nil, corev1.EventTypeWarning, ipv1.ReasonWitnessesUnreachable, "Attach",
			"Node %s heard no majority of the witnesses %s within %s (is UDP port %d open between the nodes, and are their addresses in the agents' witness-allow-from?): it holds %s on its heartbeat Lease instead, and fails over as in Lease failover",
			r.Node, strings.Join(ip.Status.Witnesses, ", "), r.Witness.fallbackAfter(), r.Witness.Port, ip.Status.Address)
	}
	return 0, leaseHeld
}

// convertHold prepares a hold on the Lease to become a hold on ws's word:
// from the moment the claim that records its generation can be read, the
// controller may move the address once a majority of ws declares that
// generation silent, which is SilentAfter after they last heard this node
// and so possibly long before the Lease would have ended. The kernel must
// therefore obey ws's word before the claim is written: ws joins the holds
// that bound the gate's deadline, and the gate is rewritten to it. It
// reports whether that is done; if not, the hold stays on the Lease.
func (r *Reconciler) convertHold(ws []string) bool {
	r.mu.Lock()
	r.witnessSets = append(slices.Clone(r.witnessSets), ws)
	r.mu.Unlock()
	err := r.Dataplane.Refresh()
	return err == nil || errors.Is(err, netconf.ErrLapsed)
}

// awaited is an IP placed here whose claim waits for its witnesses.
type awaited struct {
	since     time.Time
	witnesses []string
}

// QuorumReached reports whether the witnesses of some IP whose claim waits
// for them now vouch for this node: the agent's next pass can claim it.
// The witness run asks at each answer that vouches, so that a claim is
// made as soon as it may be rather than at the pass's next requeue.
func (r *Reconciler) QuorumReached() bool {
	if r.Witness == nil {
		return false
	}
	now, reached := time.Now(), false
	r.waiting.Range(func(_, v any) bool {
		reached = r.Witness.Peer.HeldUntil(v.(awaited).witnesses).After(now)
		return !reached
	})
	return reached
}

// waitingForWitnesses reports whether some IP placed here waits for its
// witnesses: the next reconcile must come before its fallback time.
func (r *Reconciler) waitingForWitnesses(ips []*ipv1.IP) bool {
	placed := map[types.UID]bool{}
	for _, ip := range ips {
		if r.placedHere(ip) {
			placed[ip.UID] = true
		}
	}
	waiting := false
	r.waiting.Range(func(k, _ any) bool {
		if placed[k.(types.UID)] {
			waiting = true
		} else {
			r.waiting.Delete(k) // placed elsewhere now, or gone
		}
		return true
	})
	return waiting
}

// probeWitnesses makes the peer probe the witnesses of every IP placed
// here, before it claims them: the claim waits for a quorum. It keeps
// probing a witness after the hold that named it ends: a witness declares
// silent a node it stops hearing, and a live node that merely let go must
// not look like a dead one (the controller passes over nodes declared
// silent when it names witnesses). A witness is probed until the agent
// restarts; their number is bounded by the nodes of the pools.
func (r *Reconciler) probeWitnesses(ctx context.Context, ips []*ipv1.IP) {
	if r.Witness == nil {
		return
	}
	r.mu.Lock()
	if r.probing == nil {
		r.probing = map[string]netip.AddrPort{}
	}
	want := r.probing
	r.mu.Unlock()
	for _, ip := range ips {
		if ip.Status.Node != r.Node && ip.Status.AttachedNode != r.Node {
			continue
		}
		for _, w := range ip.Status.Witnesses {
			if a, err := r.nodeAddr(ctx, w); err == nil {
				r.mu.Lock()
				want[w] = netip.AddrPortFrom(a, r.Witness.Port)
				r.mu.Unlock()
			}
		}
	}
	r.mu.Lock()
	probing := maps.Clone(want)
	r.mu.Unlock()
	r.Witness.Peer.SetWitnesses(probing)
}

// nodeAddr is a node's internal address, read once and remembered: a
// node's address does not change while it is a node, and a witness must
// stay reachable while the API server is not.
func (r *Reconciler) nodeAddr(ctx context.Context, name string) (netip.Addr, error) {
	if a, ok := r.addrs.Load(name); ok {
		return a.(netip.Addr), nil
	}
	n := &corev1.Node{}
	if err := r.Witness.Nodes.Get(ctx, "", name, n); err != nil {
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
// (see LeaseLost and HoldDeadline), and whether some IP placed here is to
// be held on the Lease (Idle). It returns whether the Lease is still held
// when some hold depends on it: if not, the caller drops those holds.
func (r *Reconciler) recordHolds(onLease, wantLease bool, sets [][]string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leaseHolds, r.wantLease, r.witnessSets = onLease, wantLease || onLease, sets
	return !onLease || r.Lease.Held()
}

// Idle reports whether nothing here is, or is about to be, held on the
// heartbeat Lease: the agent takes part in the witness protocol and every
// IP placed here is held on its witnesses' word (or none is). The Lease
// is then only liveness information, renewed rarely (heartbeat.Config.Idle).
func (r *Reconciler) Idle() bool {
	if r.Witness == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.wantLease
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
