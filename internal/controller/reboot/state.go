package reboot

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/agenthealth"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/internal/rebootagent"
	"github.com/kubext/kubext/internal/rebootplan"
)

// state is what one reconcile decides from. Nodes are replaced by what the
// API server returns after each patch, so later steps of the same reconcile
// decide on what is really stored.
type state struct {
	// nodes are read-only: the cache's own objects, or what a write
	// returned. A change is made to a copy (nodeWrite).
	nodes map[string]*corev1.Node
	// sorted are the nodes' names in order (names).
	sorted []string
	// planned is the planner's view of each node (rebootplan.NodeFrom),
	// made once per read and again whenever a patch replaces the node.
	planned map[string]rebootplan.Node
	groups  []rebootv1.RebootGroup
	// pods on each node, read only when some group has a
	// blockingPodSelector.
	pods map[string][]rebootplan.Pod
	// ledger is the approvals ledger; absent are the slots it holds for
	// nodes that cannot show them (see ledger.go).
	ledger *ledger
	absent []rebootplan.Absent
	// agents is the reboot-agents' heartbeat tracker; nil when the
	// controller does not check them.
	agents *agenthealth.Tracker
	// held are the groups a health gate holds (gates.go).
	held map[string]rebootplan.Hold
}

// read takes the nodes and groups from the informer cache and the ledger
// from its own (LedgerReader), each overlaid with this controller's own
// writes the cache has not caught up with yet (own.go). No read of the API
// server is on the way of a decision: a List of a thousand nodes costs tens
// of milliseconds of the API server's and the manager's time, and even a
// small fresh read waits behind everything else the API server does. A
// stale cache cannot make a decision exceed a budget (ledger.go, "Reading
// from a cache"): every ledger write is conditional on the ledger's
// resourceVersion as read, every node write on the node's, so a stale
// object is a conflict and a quick look again, never a write over
// something unseen.
func (r *Reconciler) read(ctx context.Context) (*state, error) {
	var (
		nodes  corev1.NodeList
		groups rebootv1.RebootGroupList
	)
	// The cache's own nodes, not copies: a thousand deep copies were the
	// largest part of a reconcile's time. Nothing in a reconcile changes a
	// node it read (TestReconcileNeverChangesTheNodesItReads).
	if err := r.reader().List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	if err := r.reader().List(ctx, &groups); err != nil {
		return nil, fmt.Errorf("listing reboot groups: %w", err)
	}
	l, err := r.readLedger(ctx)
	if err != nil {
		return nil, err
	}
	s := &state{nodes: make(map[string]*corev1.Node, len(nodes.Items)), planned: make(map[string]rebootplan.Node, len(nodes.Items)),
		groups: make([]rebootv1.RebootGroup, 0, len(groups.Items)), ledger: l, agents: r.Agents}
	for i := range nodes.Items {
		s.setNode(r.own.view(&nodes.Items[i]))
	}
	r.own.forgetAllBut(func(name string) bool { _, ok := s.nodes[name]; return ok })
	names := map[string]bool{}
	for i := range groups.Items {
		s.groups = append(s.groups, *r.ownGroups.view(&groups.Items[i]))
		names[groups.Items[i].Name] = true
	}
	r.ownGroups.forgetAllBut(func(name string) bool { return names[name] })
	if s.needPods() {
		var pods corev1.PodList
		if err := r.APIReader.List(ctx, &pods); err != nil {
			return nil, fmt.Errorf("listing pods for blockingPodSelector: %w", err)
		}
		s.pods = map[string][]rebootplan.Pod{}
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			s.pods[p.Spec.NodeName] = append(s.pods[p.Spec.NodeName],
				rebootplan.Pod{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels})
		}
	}
	return s, nil
}

func (s *state) needPods() bool {
	for _, g := range s.groups {
		if g.Spec.Drain.BlockingPodSelector != nil {
			return true
		}
	}
	return false
}

// snapshot is the planner's view of the state.
func (s *state) snapshot(now time.Time) rebootplan.Snapshot {
	snap := rebootplan.Snapshot{Groups: s.groups, Nodes: make([]rebootplan.Node, 0, len(s.nodes)), Absent: s.absent, Held: s.held, Now: now}
	for _, name := range s.names() {
		n := s.planned[name]
		n.Pods = s.pods[name]
		// Every slot the ledger holds counts, whatever the node shows:
		// the node may come from a cache that has not seen the approval
		// yet (or, for a grant whose node patch has not landed, that
		// nobody has seen yet); a grant is refused unless the ledger read
		// is the ledger as it stands.
		if _, ok := s.ledger.slots[name]; ok {
			n.Reserved = true
		}
		n.AgentDown, n.AgentDownWhy = s.agentDown(name, now)
		snap.Nodes = append(snap.Nodes, n)
	}
	return snap
}

// agentDown says whether the node's reboot-agent is not known to be alive:
// the tracker, on the controller's own clock, has not seen its heartbeat
// Lease renewed within the Lease's duration (or not at all since the
// manager started: a node it has not heard from is not approved, it is
// approved once heard from).
func (s *state) agentDown(node string, now time.Time) (bool, string) {
	if s.agents == nil || s.agents.Healthy(node) {
		return false, ""
	}
	lease := heartbeat.LeaseName(rebootagent.HeartbeatComponent, node)
	if last := s.agents.LastRenewal(node); !last.IsZero() {
		return true, fmt.Sprintf("its heartbeat Lease %s was last renewed %s ago", lease, now.Sub(last).Round(time.Second))
	}
	return true, fmt.Sprintf("no renewal of its heartbeat Lease %s seen", lease)
}

// names are the nodes in a stable order (sorted once per read, and again
// only when a node is added).
func (s *state) names() []string {
	if s.sorted == nil {
		s.sorted = make([]string, 0, len(s.nodes))
		for name := range s.nodes {
			s.sorted = append(s.sorted, name)
		}
		slices.Sort(s.sorted)
	}
	return s.sorted
}

// slotHolders are the nodes approved and not yet verified.
func (s *state) slotHolders() map[string]bool {
	out := map[string]bool{}
	for name, n := range s.planned {
		if n.HoldsSlot() {
			out[name] = true
		}
	}
	return out
}

// group is the settings a node is handled with.
type group struct {
	name string
	spec rebootv1.RebootGroupSpec
	// object is nil for the implicit default group.
	object *rebootv1.RebootGroup
}

// nodeGroups is the group of each node in one decision.
type nodeGroups map[string]group

// groupsOf indexes the groups of a decision's nodes (once per decision,
// not once per node: a thousand nodes are a million comparisons). A node
// selected by several groups gets the first one's settings; it is never
// approved while the overlap lasts, so this only matters for a reboot
// already under way.
func (s *state) groupsOf(d rebootplan.Decision) nodeGroups {
	out := nodeGroups{}
	for _, gd := range d.Groups {
		g := group{name: gd.Name, spec: implicitDefault()}
		for i := range s.groups {
			if s.groups[i].Name == gd.Name {
				g = group{name: gd.Name, spec: s.groups[i].Spec, object: &s.groups[i]}
				break
			}
		}
		for _, n := range gd.Nodes {
			if _, first := out[n]; !first {
				out[n] = g
			}
		}
	}
	return out
}

// of is the node's group: the default group's settings when no group has
// it.
func (ng nodeGroups) of(node string) group {
	if g, ok := ng[node]; ok {
		return g
	}
	return group{name: rebootv1.DefaultGroupName, spec: implicitDefault()}
}

// implicitDefault is the spec of the default group when no RebootGroup
// named "default" exists: the CRD's defaults.
func implicitDefault() rebootv1.RebootGroupSpec {
	return rebootv1.RebootGroupSpec{
		SoakSeconds:          ptr.To[int32](60),
		MaxFailures:          ptr.To[int32](rebootplan.DefaultMaxFailures),
		RebootTimeoutSeconds: int32(rebootplan.DefaultRebootTimeout / time.Second),
		Drain:                rebootv1.DrainSpec{TimeoutSeconds: 1800, DeleteEmptyDirData: ptr.To(true)},
	}
}

// setNode records a node as the API server stores it, with its planner's
// view.
func (s *state) setNode(n *corev1.Node) {
	if _, known := s.nodes[n.Name]; !known {
		s.sorted = nil
	}
	s.nodes[n.Name] = n
	s.planned[n.Name] = rebootplan.NodeFrom(n)
}

// readySince is when the node's Ready condition last turned True, or zero
// when it is not Ready.
func readySince(n *corev1.Node) time.Time {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// timeFormat is RFC 3339 with milliseconds, in UTC: the annotations'
// timestamps are parsed with time.RFC3339, which accepts the fraction.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func stamp(t time.Time) string { return t.UTC().Format(timeFormat) }

func annotationTime(n *corev1.Node, key string) (time.Time, bool) {
	v, ok := n.Annotations[key]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, v)
	return t, err == nil
}
