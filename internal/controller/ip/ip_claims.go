package ip

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubectl/pkg/util/podutils"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/ipam"
)

// Reasons of the Events on a claiming pod.
const (
	// EventClaimRefused: the pod claims an IP it may never hold; the
	// message says why.
	EventClaimRefused = "ClaimRefused"
)

// claimants lists the pods claiming the IP, each with why it may never hold
// it, if so: not allowed by spec.claimants (the IP's and its pool's), in
// the host network, or without an address of the IP's family.
func (r *Reconciler) claimants(ctx context.Context, ip *ipv1.IP, pool *ipv1.IPPool) ([]ipam.Claimant, []corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.MatchingFields{indexClaim: ip.Name}); err != nil {
		return nil, nil, fmt.Errorf("listing the pods that claim IP %s: %w", ip.Name, err)
	}
	policy := ipam.ClaimPolicy{IP: ip.Spec.Claimants}
	if pool != nil {
		policy.Pool = pool.Spec.Claimants
	}
	out := make([]ipam.Claimant, 0, len(pods.Items))
	for i := range pods.Items {
		p := &pods.Items[i]
		c := ipam.Claimant{
			Key:      p.Namespace + "/" + p.Name,
			UID:      string(p.UID),
			Node:     p.Spec.NodeName,
			Ready:    podutils.IsPodReady(p) && p.Status.PodIP != "",
			Created:  p.CreationTimestamp.Time,
			Deleting: !p.DeletionTimestamp.IsZero(),
		}
		why, err := r.authorize(ctx, policy, p)
		if err != nil {
			return nil, nil, err
		}
		c.Refused, c.NotAllowed = why, why != ""
		if c.Refused == "" {
			c.Refused = ipam.Unfit(ip.Status.Address, p)
		}
		if c.Refused != "" {
			r.refuse(p, ip, c.Refused)
		}
		out = append(out, c)
	}
	return out, pods.Items, nil
}

// authorize applies the claim policy to a pod.
func (r *Reconciler) authorize(ctx context.Context, policy ipam.ClaimPolicy, p *corev1.Pod) (string, error) {
	req := ipam.ClaimRequest{Namespace: p.Namespace, PodLabels: p.Labels}
	if policy.NeedsNamespaceLabels() {
		ns := &corev1.Namespace{}
		if err := r.Get(ctx, types.NamespacedName{Name: p.Namespace}, ns); err != nil {
			if client.IgnoreNotFound(err) != nil {
				return "", fmt.Errorf("reading namespace %s of claiming pod %s: %w", p.Namespace, p.Name, err)
			}
		}
		req.NamespaceLabels = ns.Labels
	}
	return policy.Allows(req), nil
}

// maxRefusalsRemembered bounds the memory of refusals already told.
const maxRefusalsRemembered = 10000

// refuse tells the pod, once per pod, IP and reason for the life of this
// process, why it does not hold the IP: Events are API writes, and a
// reconcile with nothing new to say writes nothing.
func (r *Reconciler) refuse(p *corev1.Pod, ip *ipv1.IP, why string) {
	key := string(p.UID) + "\x00" + ip.Name + "\x00" + why
	r.mu.Lock()
	_, told := r.refusals[key]
	if !told {
		if len(r.refusals) >= maxRefusalsRemembered {
			clear(r.refusals) // saying it again is harmless; memory is not free
		}
		r.refusals[key] = struct{}{}
	}
	r.mu.Unlock()
	if told {
		return
	}
	r.Recorder.Eventf(p, ip, corev1.EventTypeWarning, EventClaimRefused, "Claim",
		"This pod may not hold IP %s: %s", ip.Name, why)
}
