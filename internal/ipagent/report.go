package ipagent

import (
	"context"
	"errors"
	"net/netip"
	"time"

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
	var errs []error
	onLease := map[string]bool{}
	var sets [][]string
	wantLease := false
	now := time.Now()
	for _, ip := range ips {
		if !r.placedHere(ip) {
			continue
		}
		gen, may := r.holdRule(ip, held, now)
		var a netconf.Assignment
		if may {
			a, may = r.assignment(ctx, ip)
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
		// Claimed already under this rule, and attachedPod names nobody
		// else: nothing to write. Otherwise take it, and clear an
		// attachedPod of another pod before the kernel is repointed (a
		// conversion keeps it: the kernel goes on forwarding to it).
		if ip.Status.AttachedNode != r.Node || ip.Status.AttachedGeneration != gen ||
			(ip.Status.AttachedPod != "" && ip.Status.AttachedPod != ip.Status.Pod) {
			pod := ""
			if converting && ip.Status.AttachedPod == ip.Status.Pod {
				pod = ip.Status.AttachedPod
			}
			claimed, err := r.patchStatus(ctx, ip, r.Node, pod, gen)
			if err != nil {
				errs = append(errs, err)
			}
			switch {
			case !claimed && converting:
				// Still on the Lease; but a failed write may have
				// landed all the same, so the witnesses bound it too.
				sets = append(sets, ip.Status.Witnesses)
				gen = 0
			case !claimed:
				continue
			}
		}
		if gen == 0 {
			onLease[ip.Name] = true
		} else {
			sets = append(sets, ip.Status.Witnesses)
		}
		if a, ok := r.routedHere(ip, a); ok {
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
		if ip.Status.AttachedNode == node && ip.Status.AttachedPod == pod {
			continue
		}
		gen := ip.Status.AttachedGeneration
		if node == "" {
			gen = 0
		}
		var err error
		if pod != "" { // status.pod: see above
			err = r.confirm(ctx, ip, gen)
		} else {
			_, err = r.patchStatus(ctx, ip, node, pod, gen)
		}
		if err != nil {
			return err
		}
	}
	return nil
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
