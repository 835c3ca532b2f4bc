package redis

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	"github.com/kubext/kubext/internal/redisrepl"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch

// reconcileReplication observes the members' Redis, has redisrepl make one
// primary and the others replicas of it, labels the pods with their role
// and reports it all in the status. Members it cannot reach are reported,
// not waited for. It returns how soon to observe again when that must be
// sooner than usual (zero otherwise): during a handover, and while the
// primary does not answer.
func (r *Reconciler) reconcileReplication(ctx context.Context, rd *cachev1.Redis, password string) (time.Duration, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(rd.Namespace), client.MatchingLabels(selector(rd))); err != nil {
		return 0, err
	}
	members, podByName := membersOf(rd, pods.Items)
	if err := r.markDraining(ctx, members, podByName); err != nil {
		return 0, err
	}
	key := client.ObjectKeyFromObject(rd)
	pace := r.pace(key)
	previous := rd.Status.Primary
	res := redisrepl.Reconcile(ctx, r.Connect(password), pace.Mark(members), previous)
	now := time.Now()
	pace = pace.After(res.Observations, now)
	r.paces.Store(key, pace)
	r.recordChanges(rd, res)
	states := memberStates(res)
	if err := r.labelPods(ctx, podByName, states); err != nil {
		return 0, err
	}
	observeReplication(rd, res, states, previous)
	switch {
	case res.Plan.Change == redisrepl.HandingOver:
		// Clients' writes are held or refused until the role label has
		// moved to the new primary: see the swap as soon as it is done.
		return handoverPoll, res.Err
	case pace.Urgent(previous, now):
		return urgentPoll, res.Err
	}
	return 0, res.Err
}

// pace is what the last rounds of the Redis at key taught (the zero Pace
// for one not observed yet).
func (r *Reconciler) pace(key client.ObjectKey) redisrepl.Pace {
	if p, ok := r.paces.Load(key); ok {
		return p.(redisrepl.Pace)
	}
	return nil
}

// membersOf lists the members: pods 0 to size-1, which may not exist yet,
// then the pods beyond, which a scale down is removing. Only pods of the
// Redis's StatefulSet count.
func membersOf(rd *cachev1.Redis, pods []corev1.Pod) ([]redisrepl.Member, map[string]*corev1.Pod) {
	podByName := map[string]*corev1.Pod{}
	for i := range pods {
		owner := metav1.GetControllerOf(&pods[i])
		if owner != nil && owner.Kind == "StatefulSet" && owner.Name == rd.Name {
			podByName[pods[i].Name] = &pods[i]
		}
	}
	members := make([]redisrepl.Member, 0, rd.Spec.Size)
	for i := range int(rd.Spec.Size) {
		name := rd.Name + "-" + strconv.Itoa(i)
		members = append(members, redisrepl.Member{Name: name, Addr: addrOf(podByName[name])})
	}
	var leaving []int
	for name := range podByName {
		if n, err := strconv.Atoi(strings.TrimPrefix(name, rd.Name+"-")); err == nil && n >= int(rd.Spec.Size) {
			leaving = append(leaving, n)
		}
	}
	slices.Sort(leaving)
	for _, n := range leaving {
		name := rd.Name + "-" + strconv.Itoa(n)
		members = append(members, redisrepl.Member{Name: name, Addr: addrOf(podByName[name]), Leaving: true})
	}
	return members, podByName
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// markDraining marks the members whose node is cordoned (spec.unschedulable,
// as a drain does first, kubext's reboots included): a primary there hands
// over before the drain can evict it (see desiredPDBs).
func (r *Reconciler) markDraining(ctx context.Context, members []redisrepl.Member, podByName map[string]*corev1.Pod) error {
	for i := range members {
		p := podByName[members[i].Name]
		if p == nil || p.Spec.NodeName == "" {
			continue
		}
		node := &corev1.Node{}
		if err := r.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, node); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("reading node %s of pod %s: %w", p.Spec.NodeName, p.Name, err)
		}
		if node.Spec.Unschedulable {
			members[i].Draining = fmt.Sprintf("node %s is cordoned", node.Name)
		}
	}
	return nil
}

// addrOf is where a member's Redis listens: empty while its pod does not
// run or has no IP address.
func addrOf(p *corev1.Pod) string {
	if p == nil || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return ""
	}
	return net.JoinHostPort(p.Status.PodIP, strconv.Itoa(Port))
}

// memberStates is each member's state once the plan has been carried out.
func memberStates(res redisrepl.Result) map[string]cachev1.MemberState {
	repointed := map[string]bool{}
	for _, a := range res.Done {
		if a.Kind == redisrepl.Follow {
			repointed[a.Member] = true
		}
	}
	primary := res.Primary()
	states := map[string]cachev1.MemberState{}
	for _, o := range res.Observations {
		switch {
		case primary != "" && o.Name == primary:
			states[o.Name] = cachev1.MemberPrimary
		case o.Addr == "":
			states[o.Name] = cachev1.MemberPending
		case o.Err != nil:
			states[o.Name] = cachev1.MemberUnreachable
		case !repointed[o.Name] && primary != "" && o.State.Role == redisrepl.RoleReplica &&
			o.State.PrimaryAddr == res.Plan.PrimaryAddr && o.State.LinkUp:
			states[o.Name] = cachev1.MemberReplica
		default:
			states[o.Name] = cachev1.MemberSyncing
		}
	}
	return states
}

// labelPods sets the role label on each member pod: primary on the primary,
// replica on the replicas in service, none on the others, so that the
// primary and replicas Services send clients only where they are served.
// A pod losing the primary label loses it before another gets it, and the
// new primary gets it before the other pods' labels change: clients wait
// for the primary label, not for those.
func (r *Reconciler) labelPods(ctx context.Context, podByName map[string]*corev1.Pod, states map[string]cachev1.MemberState) error {
	type change struct {
		pod  *corev1.Pod
		role string
	}
	var changes []change
	for name, p := range podByName {
		role := ""
		switch states[name] {
		case cachev1.MemberPrimary:
			role = cachev1.RolePrimary
		case cachev1.MemberReplica:
			role = cachev1.RoleReplica
		}
		if p.Labels[cachev1.LabelRole] != role {
			changes = append(changes, change{p, role})
		}
	}
	order := func(c change) int {
		switch {
		case c.pod.Labels[cachev1.LabelRole] == cachev1.RolePrimary:
			return 0
		case c.role == cachev1.RolePrimary:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(changes, func(a, b change) int { return cmp.Compare(order(a), order(b)) })
	for _, c := range changes {
		patched := c.pod.DeepCopy()
		if c.role == "" {
			delete(patched.Labels, cachev1.LabelRole)
		} else {
			if patched.Labels == nil {
				patched.Labels = map[string]string{}
			}
			patched.Labels[cachev1.LabelRole] = c.role
		}
		if err := r.Patch(ctx, patched, client.MergeFrom(c.pod)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("labelling pod %s: %w", c.pod.Name, err)
		}
	}
	return nil
}

// recordChanges tells, in Events, of every change made inside Redis.
func (r *Reconciler) recordChanges(rd *cachev1.Redis, res redisrepl.Result) {
	var repointed []string
	for _, a := range res.Done {
		switch a.Kind {
		case redisrepl.Promote:
			r.Recorder.Eventf(rd, nil, corev1.EventTypeWarning, "Promoted", "Promote", "%s", capitalise(res.Plan.Why))
		case redisrepl.Follow:
			repointed = append(repointed, a.Member)
		case redisrepl.Handover:
			r.Recorder.Eventf(rd, nil, corev1.EventTypeNormal, "HandingOver", "Failover", "%s", capitalise(res.Plan.Why))
		}
	}
	if res.Plan.Change == redisrepl.Elected {
		r.Recorder.Eventf(rd, nil, corev1.EventTypeNormal, "Elected", "Elect", "%s", capitalise(res.Plan.Why))
	}
	if len(repointed) > 0 {
		r.Recorder.Eventf(rd, nil, corev1.EventTypeNormal, "Repointed", "ReplicaOf",
			"Pointed %s at primary %s (%s)", strings.Join(repointed, ", "), res.Plan.Primary, res.Plan.PrimaryAddr)
	}
	if res.Err != nil {
		r.Recorder.Eventf(rd, nil, corev1.EventTypeWarning, "ReplicationFailed", "ReplicaOf", "%v", res.Err)
	}
}

// observeReplication reports the members' states, the primary and the
// conditions. previous is the primary before this reconcile.
func observeReplication(rd *cachev1.Redis, res redisrepl.Result, states map[string]cachev1.MemberState, previous string) {
	primary := res.Primary()
	rd.Status.Primary = primary
	rd.Status.Members = nil
	rd.Status.ReadyReplicas = 0
	var unreachable, waiting []string
	for _, o := range res.Observations {
		if o.Leaving {
			continue
		}
		state := states[o.Name]
		rd.Status.Members = append(rd.Status.Members, cachev1.RedisMember{Name: o.Name, State: state})
		switch state {
		case cachev1.MemberPrimary, cachev1.MemberReplica:
			rd.Status.ReadyReplicas++
		case cachev1.MemberUnreachable:
			unreachable = append(unreachable, fmt.Sprintf("%s (%s)", o.Name, redisrepl.Describe(o.Err)))
		default:
			waiting = append(waiting, fmt.Sprintf("%s (%s)", o.Name, strings.ToLower(string(state))))
		}
	}
	primaryIs := "no primary"
	if primary != "" {
		primaryIs = "primary " + primary
	}

	ready := func(status metav1.ConditionStatus, reason, format string, args ...any) {
		setCondition(rd, cachev1.ConditionReady, status, reason, format, args...)
	}
	degraded := func(status metav1.ConditionStatus, reason, format string, args ...any) {
		setCondition(rd, cachev1.ConditionDegraded, status, reason, format, args...)
	}
	switch {
	case primary == "" && previous != "":
		why := capitalise(res.Plan.Why)
		if res.Plan.Change != redisrepl.Lost {
			why = fmt.Sprintf("Promoting %s failed: %v", res.Plan.Primary, res.Err)
		}
		ready(metav1.ConditionFalse, cachev1.ReasonPrimaryLost, "%s", why)
		degraded(metav1.ConditionTrue, cachev1.ReasonPrimaryLost, "%s", why)
	case len(unreachable) > 0:
		msg := fmt.Sprintf("kubext could not connect to the Redis of %s; %s", strings.Join(unreachable, ", "), primaryIs)
		ready(metav1.ConditionFalse, cachev1.ReasonMembersUnreachable, "%s", msg)
		degraded(metav1.ConditionTrue, cachev1.ReasonMembersUnreachable, "%s", msg)
	case len(waiting) > 0 || primary == "":
		ready(metav1.ConditionFalse, cachev1.ReasonSyncing, "Waiting for %s; %s", strings.Join(waiting, ", "), primaryIs)
		degraded(metav1.ConditionFalse, cachev1.ReasonAsExpected, "Members are joining")
	default:
		ready(metav1.ConditionTrue, cachev1.ReasonReplicating, "Primary %s and %d replica(s) in service", primary, rd.Status.ReadyReplicas-1)
		degraded(metav1.ConditionFalse, cachev1.ReasonAsExpected, "Every member is in service")
	}
	if res.Plan.Change == redisrepl.Promoted && primary != "" {
		degraded(metav1.ConditionTrue, cachev1.ReasonPromoting, "%s", capitalise(res.Plan.Why))
	}
}

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
