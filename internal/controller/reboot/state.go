package reboot

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/internal/rebootagent"
	"github.com/kubext/kubext/internal/rebootplan"
)

// state is one fresh read of the API server. Nodes are replaced by what the
// API server returns after each patch, so later steps of the same reconcile
// decide on what is really stored.
type state struct {
	nodes map[string]*corev1.Node
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
	agents *heartbeat.Tracker
	// held are the groups a health gate holds (gates.go).
	held map[string]rebootplan.Hold
}

// read takes the nodes from the informer cache, and lists the groups and
// reads the ledger from the API server. The ledger is what guards the
// budget (ledger.go, "Reading from the cache"): it and the groups are small
// and read fresh at once; the nodes, a List of which cost tens of
// milliseconds of the API server's and the manager's time on a large
// cluster, come from the cache, overlaid with this controller's own writes
// the cache has not caught up with yet (own.go). Every write made from the
// nodes is conditional on the resourceVersion read, so a stale node is a
// conflict and a quick look again, never a write over something unseen.
func (r *Reconciler) read(ctx context.Context) (*state, error) {
	var (
		nodes                          corev1.NodeList
		groups                         rebootv1.RebootGroupList
		l                              *ledger
		nodesErr, groupsErr, ledgerErr error
		wg                             sync.WaitGroup
	)
	wg.Go(func() { groupsErr = r.APIReader.List(ctx, &groups) })
	wg.Go(func() { l, ledgerErr = r.readLedger(ctx) })
	nodesErr = r.nodeReader().List(ctx, &nodes)
	wg.Wait()
	if nodesErr != nil {
		return nil, fmt.Errorf("listing nodes: %w", nodesErr)
	}
	if groupsErr != nil {
		return nil, fmt.Errorf("listing reboot groups: %w", groupsErr)
	}
	if ledgerErr != nil {
		return nil, ledgerErr
	}
	s := &state{nodes: make(map[string]*corev1.Node, len(nodes.Items)), planned: make(map[string]rebootplan.Node, len(nodes.Items)),
		groups: groups.Items, ledger: l, agents: r.Agents}
	for i := range nodes.Items {
		s.setNode(r.own.view(&nodes.Items[i]))
	}
	r.own.forgetAllBut(s.nodes)
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
		// the ledger is read fresh, the node may come from a cache that
		// has not seen the approval yet (or, for a grant whose node patch
		// has not landed, that nobody has seen yet).
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

// names are the nodes in a stable order.
func (s *state) names() []string {
	names := make([]string, 0, len(s.nodes))
	for name := range s.nodes {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
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

// groupOf finds the group of a node in a decision. A node selected by
// several groups gets the first one's settings; it is never approved while
// the overlap lasts, so this only matters for a reboot already under way.
func (s *state) groupOf(d rebootplan.Decision, node string) group {
	for _, gd := range d.Groups {
		for _, n := range gd.Nodes {
			if n != node {
				continue
			}
			for i := range s.groups {
				if s.groups[i].Name == gd.Name {
					return group{name: gd.Name, spec: s.groups[i].Spec, object: &s.groups[i]}
				}
			}
			return group{name: gd.Name, spec: implicitDefault()}
		}
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
