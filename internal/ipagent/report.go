package ipagent

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/kubext/kubext/internal/netconf"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// claim decides what the node must program, keyed by IP name: the IPs
// placed here whose holder can be attached, each claimed first (see the
// package comment). An IP whose claim did not succeed is not programmed.
//
// pending are the IPs claimed here that have nothing to program yet: an
// Elastic IP (aws public mode) reaches the node at the secondary private
// IP that EC2 associates it with, which the controller records in
// status.aws only once EC2 routes it to this node.
func (r *Reconciler) claim(ctx context.Context, ips []*ipv1.IP, held bool) (desired map[string]netconf.Assignment, pending map[string]bool, _ error) {
	desired, pending = map[string]netconf.Assignment{}, map[string]bool{}
	r.probeWitnesses(ctx, ips)
	// First what each IP needs (in order: the hold decisions read the
	// peer's state once per IP), then the claims, all at once, then what
	// landed is programmed.
	type step struct {
		ip         *ipv1.IP
		a          netconf.Assignment
		gen        int64
		converting bool
		pod        string // attachedPod the claim keeps
		claim      bool   // a write is needed
	}
	var steps []*step
	wantLease := false
	now := time.Now()
	for _, ip := range ips {
		if !r.placedHere(ip) {
			continue
		}
		gen, may := r.holdRule(ip, held, now)
		var a netconf.Assignment
		if may {
			a, may = r.assignment(ip)
		}
		// A hold on the Lease that its witnesses now vouch for moves to
		// their word, the kernel bound by it first (convertHold).
		converting := may && gen != 0 && ip.Status.AttachedNode == r.Node && ip.Status.AttachedGeneration == 0
		if converting && !r.convertHold(ip.Status.Witnesses) {
			converting, gen = false, 0
		}
		wantLease = wantLease || gen == 0
		if !may {
			continue
		}
		st := &step{ip: ip, a: a, gen: gen, converting: converting}
		// Claimed already under this rule, and attachedPod names nobody
		// else: nothing to write. Otherwise take it, and clear an
		// attachedPod of another pod before the kernel is repointed (a
		// conversion keeps it: the kernel goes on forwarding to it).
		if ip.Status.AttachedNode != r.Node || ip.Status.AttachedGeneration != gen ||
			(ip.Status.AttachedPod != "" && ip.Status.AttachedPod != ip.Status.Pod) {
			st.claim = true
			if converting && ip.Status.AttachedPod == ip.Status.Pod {
				st.pod = ip.Status.AttachedPod
			}
		}
		steps = append(steps, st)
	}
	claimed, errs := make([]bool, len(steps)), make([]error, len(steps))
	// Each write touches only its own IP; all of them run (the context is
	// only the writes' own): a piece never started would read as success.
	workqueue.ParallelizeUntil(context.WithoutCancel(ctx), parallelWrites, len(steps), func(i int) {
		if st := steps[i]; st.claim {
			claimed[i], errs[i] = r.patchStatus(ctx, st.ip, r.Node, st.pod, st.gen)
		}
	})
	onLease := map[string]bool{}
	var sets [][]string
	for i, st := range steps {
		ip, gen := st.ip, st.gen
		switch {
		case !st.claim || claimed[i]:
		case st.converting:
			// Still on the Lease; but a failed write may have landed
			// all the same, so the witnesses bound it too.
			sets = append(sets, ip.Status.Witnesses)
			gen = 0
		default:
			continue
		}
		if gen == 0 {
			onLease[ip.Name] = true
		} else {
			sets = append(sets, ip.Status.Witnesses)
		}
		if a, ok := r.routedHere(ip, st.a); ok {
			desired[ip.Name] = a
		} else {
			pending[ip.Name] = true
		}
	}
	if !r.recordHolds(len(onLease) > 0, wantLease, sets) {
		// The Lease lapsed during this pass: nothing held on it is
		// programmed (LeaseLost fences what was).
		for name := range onLease {
			delete(desired, name)
			delete(pending, name)
		}
	}
	return desired, pending, errors.Join(errs...)
}

// parallelWrites bounds the status writes one pass has in flight. A node
// given many IPs at once (a rollout, or every IP of a failed node moving
// to its standby) claims and confirms them all in one pass: one write
// after the other, the last IP waited for every other's round trips.
const parallelWrites = 16

// routedHere adapts a to an IP of an aws pool. Such an address is never
// announced: EC2 routes it to the ENI that holds it, and ARP changes
// nothing in a VPC. In public mode what reaches the node is the Elastic
// IP's private IP (EC2's 1:1 NAT), so that is the address programmed,
// once the controller has recorded that EC2 routes it to this node; false
// until then.
func (r *Reconciler) routedHere(ip *ipv1.IP, a netconf.Assignment) (netconf.Assignment, bool) {
	st := ip.Status.AWS
	if st == nil {
		return a, true
	}
	a.NoAnnounce = true
	if st.PublicIPv4Pool == "" {
		return a, true
	}
	priv, err := netip.ParseAddr(st.PrivateIP)
	if err != nil || st.Node != r.Node || priv.Is4() != a.Address.Is4() {
		return a, false
	}
	a.Address = priv
	return a, true
}

// placedHere: the IP is on this node, not going away, and no other node
// may be answering for it.
func (r *Reconciler) placedHere(ip *ipv1.IP) bool {
	return ip.Status.Node == r.Node && ip.DeletionTimestamp == nil &&
		(ip.Status.AttachedNode == "" || ip.Status.AttachedNode == r.Node)
}

// kernelView is what the kernel has, per address: any trace of it, and the
// pod it fully forwards to.
type kernelView struct {
	present    map[netip.Addr]bool
	forwarding map[netip.Addr]netip.Addr
}

func viewOf(programmed []netconf.Assignment) kernelView {
	v := kernelView{present: map[netip.Addr]bool{}, forwarding: map[netip.Addr]netip.Addr{}}
	for _, a := range programmed {
		v.present[a.Address] = true
		if a.PodIP.IsValid() && a.Interface != "" {
			v.forwarding[a.Address] = a.PodIP
		}
	}
	return v
}

// report brings attachedNode and attachedPod of this node's IPs in line
// with what the kernel has (programmed, read back after Apply). It writes
// nothing when they already are.
func (r *Reconciler) report(ctx context.Context, ips []*ipv1.IP, desired map[string]netconf.Assignment, pending map[string]bool, programmed []netconf.Assignment) error {
	kernel := viewOf(programmed)
	type change struct {
		ip        *ipv1.IP
		node, pod string
	}
	var changes []change
	for _, ip := range ips {
		if ip.Status.AttachedNode != r.Node {
			continue
		}
		node, pod := r.Node, ""
		a, want := desired[ip.Name]
		switch {
		case want && kernel.forwarding[a.Address] == a.PodIP:
			pod = ip.Status.Pod
		case pending[ip.Name]:
			// Claimed, waiting for EC2: keep the claim.
		case !want && released(ip, kernel, desired):
			node = "" // released: nothing of it is left
		}
		if ip.Status.AttachedNode != node || ip.Status.AttachedPod != pod {
			changes = append(changes, change{ip, node, pod})
		}
	}
	errs := make([]error, len(changes))
	workqueue.ParallelizeUntil(context.WithoutCancel(ctx), parallelWrites, len(changes), func(i int) {
		c := changes[i]
		gen := c.ip.Status.AttachedGeneration
		if c.node == "" {
			gen = 0
		}
		if c.pod != "" { // status.pod: see above
			errs[i] = r.confirm(ctx, c.ip, gen)
		} else {
			_, errs[i] = r.patchStatus(ctx, c.ip, c.node, c.pod, gen)
		}
	})
	return errors.Join(errs...)
}

// released reports whether nothing of ip is left in the kernel. For an
// Elastic IP the address programmed was a private IP that status may no
// longer name (it moved on): released only once the kernel holds no
// address that is not desired, which the Apply before has removed.
func released(ip *ipv1.IP, kernel kernelView, desired map[string]netconf.Assignment) bool {
	if ip.Status.AWS != nil && ip.Status.AWS.PublicIPv4Pool != "" {
		wanted := map[netip.Addr]bool{}
		for _, a := range desired {
			wanted[a.Address] = true
		}
		for addr := range kernel.present {
			if !wanted[addr] {
				return false
			}
		}
		return true
	}
	addr, _ := netip.ParseAddr(ip.Status.Address)
	return !kernel.present[addr]
}
