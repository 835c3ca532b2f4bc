package rebootcmd

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/internal/rebootagent"
	"github.com/kubext/kubext/internal/rebootgate"
	"github.com/kubext/kubext/internal/rebootplan"
)

// cluster is what the reboot commands read: every Node and RebootGroup,
// straight from the API server, and the planner's view of them.
type cluster struct {
	snapshot rebootplan.Snapshot
	nodes    map[string]*corev1.Node
}

// read lists the Nodes and RebootGroups (and, when a group has a
// drain.blockingPodSelector, the pods on nodes) and builds the snapshot the
// controller would decide from.
func read(ctx context.Context, c client.Reader, now time.Time) (*cluster, error) {
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	groups := &rebootv1.RebootGroupList{}
	if err := c.List(ctx, groups); err != nil {
		return nil, fmt.Errorf("listing RebootGroups (are kubext's CRDs installed?): %w", err)
	}
	var pods map[string][]rebootplan.Pod
	if slices.ContainsFunc(groups.Items, func(g rebootv1.RebootGroup) bool { return g.Spec.Drain.BlockingPodSelector != nil }) {
		var err error
		if pods, err = podsByNode(ctx, c); err != nil {
			return nil, err
		}
	}
	cl := &cluster{
		snapshot: rebootplan.Snapshot{Groups: groups.Items, Now: now},
		nodes:    map[string]*corev1.Node{},
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		cl.nodes[n.Name] = n
		pn := rebootplan.NodeFrom(n)
		pn.Pods = pods[n.Name]
		cl.snapshot.Nodes = append(cl.snapshot.Nodes, pn)
	}
	// The health gates, checked as the controller checks them (it does
	// so only while a node of the group waits; so does the result here).
	for i := range groups.Items {
		g := &groups.Items[i]
		h, err := rebootgate.Check(ctx, c, g, g.Status.LastDrain)
		if err != nil {
			return nil, fmt.Errorf("checking the health gates of RebootGroup %s: %w", g.Name, err)
		}
		if h != nil {
			if cl.snapshot.Held == nil {
				cl.snapshot.Held = map[string]rebootplan.Hold{}
			}
			cl.snapshot.Held[g.Name] = *h
		}
	}
	// The reboot-agents' heartbeats, as the controller checks them. Not
	// allowed to list Leases: shown as alive, as before heartbeats.
	leases := &coordinationv1.LeaseList{}
	if err := c.List(ctx, leases, client.MatchingLabels{heartbeat.LabelComponent: rebootagent.HeartbeatComponent}); err == nil {
		markAgentsDown(cl.snapshot.Nodes, leases.Items, now)
	}
	return cl, nil
}

// markAgentsDown marks the nodes whose reboot-agent has not renewed its
// heartbeat Lease within the Lease's duration, as the controller would
// find them (with --reboot-require-agent-heartbeat) and hold them back. It
// marks nothing where no reboot-agent renews a Lease at all (agents without
// heartbeats, whose controller does not check them). The Lease's renewTime
// is the agent's clock; the controller measures with its own, so the two
// may differ by the clocks' skew.
func markAgentsDown(nodes []rebootplan.Node, leases []coordinationv1.Lease, now time.Time) {
	if len(leases) == 0 {
		return
	}
	renewed := map[string]time.Time{}
	for _, l := range leases {
		if l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil ||
			l.Name != heartbeat.LeaseName(rebootagent.HeartbeatComponent, *l.Spec.HolderIdentity) {
			continue
		}
		d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 1)) * time.Second
		renewed[*l.Spec.HolderIdentity] = l.Spec.RenewTime.Add(d)
	}
	for i := range nodes {
		n := &nodes[i]
		until, ok := renewed[n.Name]
		switch {
		case !ok:
			n.AgentDown, n.AgentDownWhy = true, "no heartbeat Lease "+heartbeat.LeaseName(rebootagent.HeartbeatComponent, n.Name)
		case !now.Before(until):
			n.AgentDown, n.AgentDownWhy = true, "its heartbeat lapsed "+duration.HumanDuration(now.Sub(until))+" ago"
		}
	}
}

func podsByNode(ctx context.Context, c client.Reader) (map[string][]rebootplan.Pod, error) {
	list := &corev1.PodList{}
	if err := c.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing pods (a RebootGroup has a drain.blockingPodSelector): %w", err)
	}
	out := map[string][]rebootplan.Pod{}
	for _, p := range list.Items {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out[p.Spec.NodeName] = append(out[p.Spec.NodeName], rebootplan.Pod{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels})
	}
	return out, nil
}

// State is where a node is in the reboot protocol, as its annotations and
// status show it.
type State string

// The states of a node, in the order a reboot goes through them.
const (
	// StateNone: the node asks for nothing and was never rebooted by kubext.
	StateNone State = ""
	// StateNeeded: the node asks for a reboot and waits to be approved.
	StateNeeded State = "Needed"
	// StateApproved: approved (it holds a slot), not cordoned yet.
	StateApproved State = "Approved"
	// StateDraining: approved and cordoned; its pods are being evicted.
	StateDraining State = "Draining"
	// StateRebooting: ordered to reboot; not back with a new boot ID yet.
	StateRebooting State = "Rebooting"
	// StateSoaking: back with a new boot ID and Ready; waiting out the
	// group's soak time before it is uncordoned and its slot freed.
	StateSoaking State = "Soaking"
	// StateDone: the last reboot through kubext was verified.
	StateDone State = "Done"
	// StateFailed: its last reboot failed (reboot.kubext.io/failed).
	StateFailed State = "Failed"
	// StateStuck: ordered to reboot longer ago than the group's
	// rebootTimeoutSeconds and not verified; it keeps its slot.
	StateStuck State = "Stuck"
)

// NodeStatus is one row of `reboot status`.
type NodeStatus struct {
	Node  string `json:"node"`
	Group string `json:"group,omitempty"`
	State State  `json:"state,omitempty"`
	// Since is when the node entered the state, as far as known.
	Since time.Time `json:"since,omitzero"`
	// Detail says more, e.g. why a needing node waits.
	Detail string `json:"detail,omitempty"`
}

// nodeStatus works out the state of node n from its annotations, its
// status, and the decision d (which also says why a needing node waits).
func nodeStatus(n rebootplan.Node, node *corev1.Node, group *rebootplan.GroupDecision, d rebootplan.Decision) NodeStatus {
	s := NodeStatus{Node: n.Name}
	if group != nil {
		s.Group = group.Name
	}
	at := func(annotation string) time.Time {
		t, _ := time.Parse(time.RFC3339, n.Annotations[annotation])
		return t
	}
	ordered := at(rebootv1.AnnotationNow)
	switch {
	case group != nil && slices.Contains(group.Stuck, n.Name):
		s.State, s.Since = StateStuck, ordered
		s.Detail = fmt.Sprintf("Ordered to reboot at %s and not back with a new boot ID and Ready since; it keeps its slot", stamp(ordered))
	case n.Failed():
		s.State = StateFailed
		s.Detail = fmt.Sprintf("%s; remove the annotation %s to retry", n.Annotations[rebootv1.AnnotationFailed], rebootv1.AnnotationFailed)
	case n.HoldsSlot() && ordered.IsZero() && !n.Unschedulable:
		s.State, s.Since = StateApproved, at(rebootv1.AnnotationInProgress)
		s.Detail = "Approved; to be cordoned and drained"
	case n.HoldsSlot() && ordered.IsZero():
		s.State, s.Since = StateDraining, at(rebootv1.AnnotationInProgress)
		s.Detail = "Cordoned; pods are being evicted"
	case n.HoldsSlot() && (n.BootID == n.Annotations[rebootv1.AnnotationBootID] || n.Ready != corev1.ConditionTrue):
		s.State, s.Since = StateRebooting, ordered
		if n.Ready == corev1.ConditionTrue {
			s.Detail = "Ordered to reboot; the node is still up in boot " + short(n.BootID)
		} else {
			s.Detail = "The node is down"
		}
	case n.HoldsSlot():
		s.State, s.Since = StateSoaking, readySince(node)
		s.Detail = fmt.Sprintf("Back in boot %s (was %s) and Ready; uncordoned once the group's soak time has passed",
			short(n.BootID), short(n.Annotations[rebootv1.AnnotationBootID]))
	case n.Needs():
		s.State, s.Since = StateNeeded, at(rebootv1.AnnotationNeededSince)
		s.Detail = "Approved at the controller's next decision"
		for _, w := range d.Waiting() {
			if w.Node == n.Name {
				s.Detail = fmt.Sprintf("Waits (%s): %s", w.Reason, w.Message)
			}
		}
	default:
		if rebooted := at(rebootv1.AnnotationRebootedAt); !rebooted.IsZero() {
			s.State, s.Since = StateDone, rebooted
			s.Detail = "Rebooted at " + stamp(rebooted)
		}
	}
	return s
}

// readySince is when the node's Ready condition last changed.
func readySince(node *corev1.Node) time.Time {
	if node == nil {
		return time.Time{}
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// groupOf maps each node to the decision of the group it belongs to; a node
// of several groups maps to the first.
func groupOf(d rebootplan.Decision) map[string]*rebootplan.GroupDecision {
	out := map[string]*rebootplan.GroupDecision{}
	for i := range d.Groups {
		for _, n := range d.Groups[i].Nodes {
			if _, ok := out[n]; !ok {
				out[n] = &d.Groups[i]
			}
		}
	}
	return out
}

// groupSummary is the one-word state of a group and why.
func groupSummary(g *rebootplan.GroupDecision) string {
	switch {
	case g.Err != nil:
		return "Invalid: " + g.Err.Error()
	case g.Paused:
		return "Paused"
	case g.Halted:
		return fmt.Sprintf("Halted: %d failed (%s)", len(g.Failed), strings.Join(g.Failed, ", "))
	case len(g.Rebooting) > 0:
		return "RollingOut"
	case !g.InWindow && !g.NextWindow.IsZero():
		return "OutsideWindow: next opens " + stamp(g.NextWindow)
	case g.Held != nil && len(g.Waiting) > 0:
		return "GateHeld: " + g.Held.Reason + ": " + g.Held.Message
	case len(g.Waiting) > 0 || len(g.Approved) > 0:
		return "Waiting"
	}
	return "Idle"
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return t.UTC().Format(time.RFC3339)
}

func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return duration.HumanDuration(d)
}

// short abbreviates a boot ID (a UUID) to its first 8 characters.
func short(bootID string) string {
	if bootID == "" {
		return "<unknown>"
	}
	if len(bootID) > 8 {
		return bootID[:8]
	}
	return bootID
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
