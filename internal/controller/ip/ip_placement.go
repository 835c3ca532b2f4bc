package ip

import (
	"context"
	"fmt"
	"slices"
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
	"github.com/kubext/kubext/internal/ipcond"
	"github.com/kubext/kubext/internal/statuspatch"
)

// reconcilePlacement chooses the holder among the claiming pods and moves
// the address to its node, one node at a time.
func (r *Reconciler) reconcilePlacement(ctx context.Context, ip *ipv1.IP, status *statuspatch.Patcher[*ipv1.IP]) (ctrl.Result, error) {
	pool, err := r.poolOf(ctx, ip)
	if err != nil {
		return ctrl.Result{}, err
	}
	claimants, pods, err := r.claimants(ctx, ip, pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	ip.Status.Claimed = len(claimants) > 0
	if stop, why := r.unattachable(ctx, ip, pool); stop != "" {
		// Nothing may answer for this address: take it off any node.
		ip.Status.Standbys = nil
		return r.settle(ctx, ip, pool, ipam.Holding{Reason: stop, Message: why}, status)
	}
	allowed, err := r.nodeAllowed(ctx, pool)
	if err != nil {
		ip.Status.Standbys = nil
		return r.settle(ctx, ip, pool, ipam.Holding{Reason: ipv1.ReasonNoEligibleNode, Message: err.Error()}, status)
	}
	healthy, err := r.healthView(ctx, ip)
	if err != nil {
		return ctrl.Result{}, err
	}
	current, cleared, err := r.moveRequest(ctx, ip, claimants, healthy, allowed)
	if err != nil || cleared {
		return ctrl.Result{}, err
	}
	holding := ipam.ChooseHolder(current, claimants, healthy, allowed)
	ip.Status.Standbys = keys(holding.Standbys)

	res, err := r.settle(ctx, ip, pool, holding, status)
	if err != nil {
		return res, err
	}
	if holding.Holder.Key == "" && holding.Reason == ipv1.ReasonNodeLost && r.DeleteStalePods {
		if err := r.deleteStalePods(ctx, ip, pods); err != nil {
			return ctrl.Result{}, err
		}
	}
	return res, nil
}

// settle places the IP for the holding and says when to look again.
func (r *Reconciler) settle(ctx context.Context, ip *ipv1.IP, pool *ipv1.IPPool, h ipam.Holding, status *statuspatch.Patcher[*ipv1.IP]) (ctrl.Result, error) {
	placed, ec2, err := r.place(ctx, ip, pool, h, status)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("placing IP %s: %w", ip.Name, err)
	}
	if ec2 != nil {
		// EC2 refused or failed: its condition says why; try again later,
		// not at once (the SDK already retried the call).
		return ctrl.Result{RequeueAfter: ec2Retry}, nil
	}
	if st := ip.Status.AWS; st != nil && len(st.GiveBack) > 0 {
		// A former private IP of the Elastic IP is left to give back.
		return ctrl.Result{RequeueAfter: ec2Retry}, nil
	}
	if !placed || r.doubtful(ip) {
		// Waiting for the old node to let go, or for a node the informer
		// calls lost to be confirmed so (or not) by the API server: its
		// agent's update or its heartbeat brings us back, and so does this.
		return ctrl.Result{RequeueAfter: confirmEvery}, nil
	}
	waits := awaitsWitnesses(ip, pool)
	r.awaiting.set(ip.Name, waits)
	if waits {
		return ctrl.Result{RequeueAfter: witnessRetry}, nil
	}
	return ctrl.Result{RequeueAfter: resync}, nil
}

// confirmEvery is how often a node that the informer shows as lost, but the
// API server has not confirmed so, is looked at again.
const confirmEvery = 250 * time.Millisecond

// doubtful reports whether a node that may answer for the IP is unhealthy
// as the informer shows it.
func (r *Reconciler) doubtful(ip *ipv1.IP) bool {
	for _, n := range []string{ip.Status.Node, ip.Status.AttachedNode} {
		if n != "" && !r.Health.Healthy(n) {
			return true
		}
	}
	return false
}

// healthView says which nodes are healthy for this IP's placement. It is
// the informer's view, except for the nodes that may be answering for the
// IP now (status.node and status.attachedNode): those keep the benefit of
// the doubt until the API server confirms that their agent stopped
// renewing (Tracker.Lost). A paused manager or a slow watch thus never
// moves an IP away from a live node; it only delays failover by a read.
//
// A node holding the IP on its witnesses' word (Witness failover) is
// judged by them alone: answering until a majority has declared it silent,
// whatever its heartbeat shows, and lost once they have, even if it still
// renews (cut off from its peers, it has stopped answering).
func (r *Reconciler) healthView(ctx context.Context, ip *ipv1.IP) (func(string) bool, error) {
	answering := map[string]bool{}
	if isWitness, lost := r.witnessHold(ip); isWitness {
		answering[ip.Status.AttachedNode] = !lost
	}
	for _, n := range []string{ip.Status.Node, ip.Status.AttachedNode} {
		if _, known := answering[n]; n == "" || known || r.Health.Healthy(n) {
			continue
		}
		lost, err := r.Health.Lost(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("checking the heartbeat of node %s for IP %s: %w", n, ip.Name, err)
		}
		answering[n] = !lost
	}
	return func(n string) bool {
		if v, known := answering[n]; known {
			return v
		}
		return r.Health.Healthy(n)
	}, nil
}

// place points status.node at the holder's node when no other node is
// attached, and sets the Attached condition. It returns false while it
// waits for another node to let go. For an aws pool it also makes sure
// EC2 routes the address to the holder once its agent has claimed it
// (leadInEC2 has usually moved it before the claim), and takes it off
// every node in EC2 once none may answer; ec2 is EC2's failure, if any.
func (r *Reconciler) place(ctx context.Context, ip *ipv1.IP, pool *ipv1.IPPool, h ipam.Holding, status *statuspatch.Patcher[*ipv1.IP]) (placed bool, ec2 *ec2Failure, err error) {
	aws := r.AWS != nil && isAWS(ip, pool)
	if aws {
		prepareAWS(ip, pool)
	}
	target, pod, uid := h.Holder.Node, h.Holder.Key, h.Holder.UID
	previous := ip.Status.AttachedNode // not a witness of the next hold
	if target != ip.Status.Node || pod != ip.Status.Pod {
		// Another node may answer: it lets go first. The same node just
		// repoints its forwarding at the new pod.
		if att := ip.Status.AttachedNode; att != "" && att != target {
			detached, err := r.detach(ctx, ip, fmt.Sprintf("handing over to %s", orNone(pod)))
			if err != nil || !detached {
				ip.Status.Pod, ip.Status.PodUID = pod, uid // who will hold it once the old node lets go
				return false, nil, err
			}
		}
		r.moved(ctx, ip, pod, target)
		if target != ip.Status.Node {
			// A new hold: its witnesses are fixed until it ends.
			ip.Status.Witnesses = r.witnessesFor(ctx, ip, pool, target, previous, h)
		}
		ip.Status.Node, ip.Status.Pod = target, pod
	} else if awaitsWitnesses(ip, pool) {
		r.nameLateWitnesses(ctx, ip, pool, h)
	}
	// The holder's UID, which the agent forwards to: new with the holder,
	// or the same name's new pod (a StatefulSet's replacement, chosen again
	// as the current holder; the agent stopped forwarding to it meanwhile),
	// or an IP placed before the field.
	ip.Status.PodUID = uid
	if aws {
		switch {
		case target != "" && ip.Status.AttachedNode == target:
			// Usually already moved when the hold was recorded
			// (leadInEC2); this verifies, or retries a failed move.
			if ec2 = r.attachEC2(ctx, ip, target, status); ec2 == nil {
				r.preResolve(ctx, ip, standbyNodes(h, target))
			}
		case target == "" && ip.Status.AttachedNode == "":
			ec2 = r.detachEC2(ctx, ip)
		}
	}
	switch {
	case ec2 != nil:
		ipcond.Set(ip, metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionFalse,
			Reason: ec2.reason, Message: ec2.message})
	case target == "":
		ipcond.Set(ip, metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionFalse,
			Reason: h.Reason, Message: h.Message})
	case aws && ip.Status.AttachedNode == target && ip.Status.AWS.Node != target:
		ipcond.Set(ip, metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionFalse,
			Reason: ipv1.ReasonEC2Attaching, Message: fmt.Sprintf("moving %s to node %s in EC2", ip.Status.Address, target)})
	case ip.Status.AttachedNode == target && ip.Status.AttachedPod == pod:
		// The agent writes Attached=True with its confirmation, when it
		// may (ipcond.AgentMayConfirm): a move this controller timed is
		// attached all the same.
		if c := meta.FindStatusCondition(ip.Status.Conditions, ipv1.ConditionAttached); c == nil || c.Status != metav1.ConditionTrue || r.moveStarts.running(ip.Name) {
			r.attached(ip)
		}
		// The message does not name the hold's rule (Lease or witnesses):
		// it changes when the witnesses vouch, after Ready, and each change
		// would cost a status write per IP. status.attachedGeneration
		// says it, and kubectl-kubext shows it ("Held on").
		ipcond.Confirm(ip)
	case ip.Status.AttachedNode == target && waitingFor(ip, target):
		// The agent took the address (its claim comes before it sees the
		// holder pod) but has not confirmed: Attached stays False with
		// the same "waiting for the agent" it already says, still true.
		// Writing Programming here would be a status write per IP that
		// tells a reader nothing Attached=False does not; a hold that was
		// confirmed and is repointed at another pod (the case below) does
		// change Attached and is written.
	case ip.Status.AttachedNode == target:
		ipcond.Set(ip, metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionFalse,
			Reason: ipv1.ReasonProgramming, Message: fmt.Sprintf("the agent on %s is programming %s for %s", target, ip.Status.Address, pod)})
	default:
		ipcond.Set(ip, metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionFalse,
			Reason: ipv1.ReasonWaitingForAgent, Message: waitingMessage(ip, target)})
	}
	return true, ec2, nil
}

// standbyNodes are the nodes of the first standbys, other than the
// holder's: where a failover would move the address next.
func standbyNodes(h ipam.Holding, holder string) []string {
	var out []string
	for _, s := range h.Standbys {
		if s.Node != holder && s.Node != "" && !slices.Contains(out, s.Node) {
			out = append(out, s.Node)
		}
		if len(out) == 2 {
			break
		}
	}
	return out
}

// detach clears status.node and reports whether no node may answer any
// more. The agent that wrote status.attachedNode clears it once nothing of
// the address is left on its node. A node whose agent the API server
// confirms has not renewed its heartbeat for a whole lease duration has
// fenced itself (see internal/heartbeat): its attachment is cleared on its
// behalf. Nothing less than that confirmation does: the informer's view
// alone may be stale.
func (r *Reconciler) detach(ctx context.Context, ip *ipv1.IP, why string) (bool, error) {
	ip.Status.Node = ""
	att := ip.Status.AttachedNode
	if att == "" {
		ip.Status.AttachedPod = ""
		return true, nil
	}
	isWitness, lost := r.witnessHold(ip)
	var err error
	if !isWitness {
		lost, err = r.Health.Lost(ctx, att)
		if err != nil {
			err = fmt.Errorf("checking the heartbeat of node %s, attached for IP %s: %w", att, ip.Name, err)
		}
	}
	if err != nil || !lost {
		ipcond.Set(ip, metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionFalse,
			Reason: ipv1.ReasonDetaching, Message: fmt.Sprintf("%s: waiting for node %s to release %s", why, att, ip.Status.Address)})
		return false, err
	}
	if isWitness {
		r.Recorder.Eventf(ip, nil, corev1.EventTypeWarning, ipv1.ReasonNodeLost, "Failover",
			"A majority of the witnesses of node %s (%s) declared it silent; it has stopped answering for %s",
			att, strings.Join(ip.Status.Witnesses, ", "), ip.Status.Address)
		r.failoverStarts.start(ip.Name, r.now())
	} else {
		r.Recorder.Eventf(ip, nil, corev1.EventTypeWarning, ipv1.ReasonNodeLost, "Failover",
			"Node %s stopped renewing its heartbeat; its agent has fenced itself and released %s", att, ip.Status.Address)
		r.failoverStarts.start(ip.Name, r.Health.LastRenewal(att))
	}
	failovers.Inc()
	ip.Status.AttachedNode, ip.Status.AttachedPod, ip.Status.AttachedGeneration = "", "", 0
	return true, nil
}

// moved records a change of holder. The pod is told at once (HoldsIP);
// the IP is told once its new holder answers (attached): a placement and
// its attachment are one Event on the IP, not two, since Events are a
// good part of what a converging cluster writes (docs/benchmarks.md,
// "Static IP at scale"), and until the agent confirms, the IP's Attached
// condition says where it waits and why.
func (r *Reconciler) moved(ctx context.Context, ip *ipv1.IP, pod, node string) {
	if pod == "" {
		return
	}
	now := r.now()
	ip.Status.LastMoveTime = &metav1.Time{Time: now}
	r.moveStarts.start(ip.Name, now)
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
	r.Recorder.Eventf(ip, nil, corev1.EventTypeNormal, "Attached", "Attach", "Node %s answers for %s from pool %s, held by pod %s",
		ip.Status.Node, ip.Status.Address, ip.Status.Pool, ip.Status.AttachedPod)
}

// nodeAllowed returns whether the pool's node selector admits a node. A
// pool that is gone admits every node: its IPs keep their addresses (see
// reconcileAddress) and keep failing over. An invalid selector admits none
// and says why.
func (r *Reconciler) nodeAllowed(ctx context.Context, pool *ipv1.IPPool) (func(string) bool, error) {
	if pool == nil || pool.Spec.NodeSelector == nil {
		return func(string) bool { return true }, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(pool.Spec.NodeSelector)
	if err != nil {
		return nil, fmt.Errorf("the nodeSelector of pool %s is invalid, so no node may hold its addresses: %v", pool.Name, err)
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
	healthy, allowed func(string) bool) (current string, cleared bool, err error) {
	to, ok := ip.Annotations[ipv1.AnnotationMoveTo]
	if !ok {
		return ip.Status.Pod, false, nil
	}
	if ip.Status.Pod == to {
		return to, true, r.clearMoveRequest(ctx, ip)
	}
	if ipam.ChooseHolder(to, claimants, healthy, allowed).Holder.Key != to {
		r.Recorder.Eventf(ip, nil, corev1.EventTypeWarning, "MoveRefused", "Move",
			"Cannot move %s to %s: it is not a Ready claimant on a healthy, allowed node", ip.Name, to)
		return ip.Status.Pod, true, r.clearMoveRequest(ctx, ip)
	}
	return to, false, nil
}

func (r *Reconciler) clearMoveRequest(ctx context.Context, ip *ipv1.IP) error {
	orig := ip.DeepCopy()
	delete(ip.Annotations, ipv1.AnnotationMoveTo)
	if err := r.Patch(ctx, ip, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("removing the move request of IP %s: %w", ip.Name, err)
	}
	return nil
}

// deleteStalePods deletes claiming pods stuck on nodes whose agent is lost,
// so that their controllers recreate them on healthy nodes. Lost is
// confirmed with the API server for each node: a stale informer never gets
// a healthy pod deleted.
func (r *Reconciler) deleteStalePods(ctx context.Context, ip *ipv1.IP, pods []corev1.Pod) error {
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || !p.DeletionTimestamp.IsZero() {
			continue
		}
		if lost, err := r.Health.Lost(ctx, p.Spec.NodeName); err != nil || !lost {
			if err != nil {
				return fmt.Errorf("checking the heartbeat of node %s of pod %s/%s: %w", p.Spec.NodeName, p.Namespace, p.Name, err)
			}
			continue
		}
		uid := p.UID
		if err := r.Delete(ctx, p, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting pod %s/%s, claiming IP %s on lost node %s: %w", p.Namespace, p.Name, ip.Name, p.Spec.NodeName, err)
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

func (f *stopwatch) running(ip string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.started[ip]
	return ok
}

func (f *stopwatch) done(ip string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.started[ip]
	delete(f.started, ip)
	return t, ok
}

// waitingFor reports whether the IP's Attached condition already says, for
// its current generation, that it waits for the agent on node to attach
// its address.
func waitingFor(ip *ipv1.IP, node string) bool {
	c := meta.FindStatusCondition(ip.Status.Conditions, ipv1.ConditionAttached)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ipv1.ReasonWaitingForAgent &&
		c.ObservedGeneration == ip.Generation && c.Message == waitingMessage(ip, node)
}

func waitingMessage(ip *ipv1.IP, node string) string {
	return fmt.Sprintf("waiting for the agent on %s to attach %s", node, ip.Status.Address)
}
