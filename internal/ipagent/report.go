package ipagent

import (
	"context"
	"errors"
	"net/netip"

	"github.com/kubext/kubext/internal/netconf"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// claim decides what the node must program, keyed by IP name: the IPs
// placed here whose holder can be attached, each claimed first (see the
// package comment). An IP whose claim did not succeed is not programmed.
func (r *Reconciler) claim(ctx context.Context, ips []*ipv1.IP, held bool) (map[string]netconf.Assignment, error) {
	desired := map[string]netconf.Assignment{}
	if !held {
		return desired, nil
	}
	var errs []error
	for _, ip := range ips {
		if !r.placedHere(ip) {
			continue
		}
		a, ok := r.assignment(ctx, ip)
		if !ok {
			continue
		}
		// Claimed already, and attachedPod names nobody else: nothing to
		// write. Otherwise take it, and clear an attachedPod of another
		// pod before the kernel is repointed.
		if ip.Status.AttachedNode != r.Node || (ip.Status.AttachedPod != "" && ip.Status.AttachedPod != ip.Status.Pod) {
			claimed, err := r.patchStatus(ctx, ip, r.Node, "")
			if err != nil {
				errs = append(errs, err)
			}
			if !claimed {
				continue
			}
		}
		desired[ip.Name] = a
	}
	return desired, errors.Join(errs...)
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
func (r *Reconciler) report(ctx context.Context, ips []*ipv1.IP, desired map[string]netconf.Assignment, programmed []netconf.Assignment) error {
	kernel := viewOf(programmed)
	for _, ip := range ips {
		if ip.Status.AttachedNode != r.Node {
			continue
		}
		node, pod := r.Node, ""
		a, want := desired[ip.Name]
		addr, _ := netip.ParseAddr(ip.Status.Address)
		switch {
		case want && kernel.forwarding[a.Address] == a.PodIP:
			pod = ip.Status.Pod
		case !want && !kernel.present[addr]:
			node = "" // released: nothing of it is left
		}
		if ip.Status.AttachedNode == node && ip.Status.AttachedPod == pod {
			continue
		}
		if _, err := r.patchStatus(ctx, ip, node, pod); err != nil {
			return err
		}
	}
	return nil
}
