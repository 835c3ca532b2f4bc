package ip

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/ipam"
)

// reconcilePlacement chooses the holder among the claiming pods and moves
// the address to its node, one node at a time.
func (r *Reconciler) reconcilePlacement(ctx context.Context, ip *ipv1.IP) (ctrl.Result, error) {
	claimants, pods, err := r.claimants(ctx, ip)
	if err != nil {
		return ctrl.Result{}, err
	}
	ip.Status.Claimed = len(claimants) > 0
	allowed, err := r.nodeAllowed(ctx, ip)
	if err != nil {
		return ctrl.Result{}, err
	}
	current, cleared, err := r.moveRequest(ctx, ip, claimants, allowed)
	if err != nil || cleared {
		return ctrl.Result{}, err
	}
	holding := ipam.ChooseHolder(current, claimants, r.Health.Healthy, allowed)
	ip.Status.Standbys = keys(holding.Standbys)

	if !r.place(ctx, ip, holding) {
		// Waiting for the old node to let go; its agent's update or its
		// heartbeat running out brings us back.
		return ctrl.Result{RequeueAfter: resync}, nil
	}
	if holding.Holder.Key == "" && holding.Reason == ipv1.ReasonNodeLost && r.DeleteStalePods {
		if err := r.deleteStalePods(ctx, ip, pods); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: resync}, nil
}

// place points status.node at the holder's node when no other node is
// attached, and sets the Attached condition. It returns false while it
// waits for another node to let go.
func (r *Reconciler) place(ctx context.Context, ip *ipv1.IP, h ipam.Holding) bool {
	target, pod := h.Holder.Node, h.Holder.Key
	if target != ip.Status.Node || pod != ip.Status.Pod {
		// Another node answers: it lets go first. The same node just
		// repoints its forwarding at the new pod.
		if att := ip.Status.AttachedNode; att != "" && att != target {
			if !r.detach(ip, fmt.Sprintf("handing over to %s", orNone(pod))) {
				ip.Status.Pod = pod // who will hold it once the old node lets go
				return false
			}
		}
		r.moved(ctx, ip, pod, target)
		ip.Status.Node, ip.Status.Pod = target, pod
	}
	switch {
	case target == "":
		setCondition(ip, metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionFalse,
			Reason: h.Reason, Message: h.Message})
	case ip.Status.AttachedNode == target:
		if c := meta.FindStatusCondition(ip.Status.Conditions, ipv1.ConditionAttached); c == nil || c.Status != metav1.ConditionTrue {
			r.attached(ip)
		}
		setCondition(ip, metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionTrue,
			Reason: ipv1.ReasonAgentConfirmed, Message: fmt.Sprintf("the agent on %s answers for %s", target, ip.Status.Address)})
	default:
		setCondition(ip, metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionFalse,
			Reason: ipv1.ReasonWaitingForAgent, Message: fmt.Sprintf("waiting for the agent on %s to attach %s", target, ip.Status.Address)})
	}
	return true
}

// detach clears status.node and reports whether no node is attached any
// more. A node whose agent stopped renewing its heartbeat for a whole lease
// duration has fenced itself: its attachment is cleared on its behalf.
func (r *Reconciler) detach(ip *ipv1.IP, why string) bool {
	ip.Status.Node = ""
	att := ip.Status.AttachedNode
	if att == "" {
		return true
	}
	if r.Health.Healthy(att) {
		setCondition(ip, metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionFalse,
			Reason: ipv1.ReasonDetaching, Message: fmt.Sprintf("%s: waiting for node %s to release %s", why, att, ip.Status.Address)})
		return false
	}
	r.Recorder.Eventf(ip, nil, corev1.EventTypeWarning, ipv1.ReasonNodeLost, "Failover",
		"Node %s stopped renewing its heartbeat; its agent has fenced itself and released %s", att, ip.Status.Address)
	r.failoverStarts.start(ip.Name, r.Health.LastRenewal(att))
	failovers.Inc()
	ip.Status.AttachedNode = ""
	return true
}

// moved records a change of holder.
func (r *Reconciler) moved(ctx context.Context, ip *ipv1.IP, pod, node string) {
	if pod == "" {
		return
	}
	now := r.now()
	ip.Status.LastMoveTime = &metav1.Time{Time: now}
	r.moveStarts.start(ip.Name, now)
	r.Recorder.Eventf(ip, nil, corev1.EventTypeNormal, "Assigned", "Place", "%s is assigned to pod %s on node %s", ip.Status.Address, pod, node)
	if p := r.pod(ctx, pod); p != nil {
		r.Recorder.Eventf(p, ip, corev1.EventTypeNormal, "HoldsIP", "Place", "This pod holds IP %s (%s) on node %s", ip.Name, ip.Status.Address, node)
	}
}

// attached records the agent's confirmation.
func (r *Reconciler) attached(ip *ipv1.IP) {
	// In memory: the status keeps times to the second only.
	if start, ok := r.moveStarts.done(ip.Name); ok {
		attachSeconds.Observe(r.now().Sub(start).Seconds())
	}
	if start, ok := r.failoverStarts.done(ip.Name); ok {
		failoverSeconds.Observe(r.now().Sub(start).Seconds())
	}
	r.Recorder.Eventf(ip, nil, corev1.EventTypeNormal, "Attached", "Attach", "Node %s answers for %s", ip.Status.Node, ip.Status.Address)
}

// claimants lists the pods claiming the IP.
func (r *Reconciler) claimants(ctx context.Context, ip *ipv1.IP) ([]ipam.Claimant, []corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.MatchingFields{indexClaim: ip.Name}); err != nil {
		return nil, nil, err
	}
	out := make([]ipam.Claimant, 0, len(pods.Items))
	for _, p := range pods.Items {
		out = append(out, ipam.Claimant{
			Key:      p.Namespace + "/" + p.Name,
			Node:     p.Spec.NodeName,
			Ready:    podReady(&p) && p.Status.PodIP != "",
			Created:  p.CreationTimestamp.Time,
			Deleting: !p.DeletionTimestamp.IsZero(),
		})
	}
	return out, pods.Items, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeAllowed returns whether the pool's node selector admits a node.
func (r *Reconciler) nodeAllowed(ctx context.Context, ip *ipv1.IP) (func(string) bool, error) {
	pool := &ipv1.IPPool{}
	if err := r.Get(ctx, types.NamespacedName{Name: ip.Status.Pool}, pool); err != nil {
		// A pool deleted meanwhile allows no node; the next reconcile
		// reports it on Allocated.
		return func(string) bool { return false }, client.IgnoreNotFound(err)
	}
	if pool.Spec.NodeSelector == nil {
		return func(string) bool { return true }, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(pool.Spec.NodeSelector)
	if err != nil {
		return func(string) bool { return false }, nil
	}
	return func(name string) bool {
		node := &corev1.Node{}
		if err := r.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
			return false
		}
		return sel.Matches(labels.Set(node.Labels))
	}, nil
}

// moveRequest honours the ip.kubext.io/move-to annotation: it returns the
// pod to treat as the holder. The annotation is removed only once the move
// is recorded in status (or refused), so that a crash in between loses
// nothing; cleared reports that it was removed in this call, and the
// reconcile stops there (the update brings it back).
func (r *Reconciler) moveRequest(ctx context.Context, ip *ipv1.IP, claimants []ipam.Claimant,
	allowed func(string) bool) (current string, cleared bool, err error) {
	to, ok := ip.Annotations[ipv1.AnnotationMoveTo]
	if !ok {
		return ip.Status.Pod, false, nil
	}
	if ip.Status.Pod == to {
		return to, true, r.clearMoveRequest(ctx, ip)
	}
	if ipam.ChooseHolder(to, claimants, r.Health.Healthy, allowed).Holder.Key != to {
		r.Recorder.Eventf(ip, nil, corev1.EventTypeWarning, "MoveRefused", "Move",
			"Cannot move %s to %s: it is not a Ready claimant on a healthy, allowed node", ip.Name, to)
		return ip.Status.Pod, true, r.clearMoveRequest(ctx, ip)
	}
	return to, false, nil
}

func (r *Reconciler) clearMoveRequest(ctx context.Context, ip *ipv1.IP) error {
	orig := ip.DeepCopy()
	delete(ip.Annotations, ipv1.AnnotationMoveTo)
	return r.Patch(ctx, ip, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// deleteStalePods deletes claiming pods stuck on nodes whose agent is lost,
// so that their controllers recreate them on healthy nodes.
func (r *Reconciler) deleteStalePods(ctx context.Context, ip *ipv1.IP, pods []corev1.Pod) error {
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || !p.DeletionTimestamp.IsZero() || r.Health.Healthy(p.Spec.NodeName) {
			continue
		}
		uid := p.UID
		if err := r.Delete(ctx, p, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return err
		}
		r.Recorder.Eventf(p, ip, corev1.EventTypeWarning, "StalePodDeleted", "Failover",
			"Deleted: node %s is lost and this pod claims IP %s", p.Spec.NodeName, ip.Name)
	}
	return nil
}

func (r *Reconciler) pod(ctx context.Context, key string) *corev1.Pod {
	ns, name, ok := strings.Cut(key, "/")
	if !ok {
		return nil
	}
	p := &corev1.Pod{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
		return nil
	}
	return p
}

func keys(cs []ipam.Claimant) []string {
	if len(cs) == 0 {
		return nil
	}
	out := make([]string, 0, min(len(cs), 64))
	for _, c := range cs[:min(len(cs), 64)] {
		out = append(out, c.Key)
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "no pod"
	}
	return s
}

// stopwatch remembers when something started, per IP, to measure how long
// it took once it is done.
type stopwatch struct {
	mu      sync.Mutex
	started map[string]time.Time
}

func newStopwatch() *stopwatch { return &stopwatch{started: map[string]time.Time{}} }

func (f *stopwatch) start(ip string, t time.Time) {
	if !t.IsZero() {
		f.mu.Lock()
		f.started[ip] = t
		f.mu.Unlock()
	}
}

func (f *stopwatch) done(ip string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.started[ip]
	delete(f.started, ip)
	return t, ok
}
