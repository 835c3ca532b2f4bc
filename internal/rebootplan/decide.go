// Package rebootplan decides which nodes may reboot now. It is pure logic
// over a snapshot of RebootGroups and Nodes (no Kubernetes client): the
// controller feeds it what it read from the API server and acts on the
// approvals; `kubectl kubext reboot plan` runs the same decisions forward in
// Plan.
package rebootplan

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// Defaults applied to fields left at their zero value, matching the CRD's
// defaults, so that a group read without API server defaulting (or the
// implicit default group) behaves the same.
const (
	// DefaultRebootTimeout is rebootTimeoutSeconds when unset.
	DefaultRebootTimeout = 900 * time.Second
	// DefaultMaxFailures is maxFailures when unset.
	DefaultMaxFailures = 1
)

// Node is what the planner needs to know about one Node.
type Node struct {
	Name        string
	Labels      map[string]string
	Annotations map[string]string
	// Ready is the status of the node's Ready condition; "" counts as
	// Unknown.
	Ready         corev1.ConditionStatus
	Unschedulable bool
	BootID        string
	// Reserved says that the approvals ledger holds a slot for the node that
	// its annotations do not show yet: an approval recorded whose node
	// patch has not landed (or never will; the controller finds out).
	Reserved bool
	// Pods are the pods on the node, needed only to honour a group's
	// drain.blockingPodSelector; leave it nil when no group sets one.
	Pods []Pod
	// AgentDown says the controller checks agents' heartbeats and the
	// node's reboot-agent has not renewed its own lately (AgentDownWhy
	// says what was seen); such a node is not approved.
	AgentDown    bool
	AgentDownWhy string
	// ControlPlaneTaint says the node carries a taint with a control-plane
	// role key (kubeadm's node-role.kubernetes.io/control-plane:NoSchedule).
	ControlPlaneTaint bool
	// selectedControlPlane: a group's controlPlaneSelector matches the
	// node (set by Decide on its own copy of the snapshot's nodes).
	selectedControlPlane bool
}

// Pod is a pod on a node, as far as blocking pod selectors are concerned.
type Pod struct {
	Namespace, Name string
	Labels          map[string]string
}

// NodeFrom extracts a Node from a corev1.Node. It keeps references to the
// node's label and annotation maps; the planner never modifies them.
func NodeFrom(n *corev1.Node) Node {
	out := Node{
		Name:          n.Name,
		Labels:        n.Labels,
		Annotations:   n.Annotations,
		Ready:         corev1.ConditionUnknown,
		Unschedulable: n.Spec.Unschedulable,
		BootID:        n.Status.NodeInfo.BootID,
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Ready = c.Status
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == rebootv1.LabelControlPlane || t.Key == rebootv1.LabelMaster {
			out.ControlPlaneTaint = true
		}
	}
	return out
}

// ControlPlane says whether the node is a control-plane node: by its role
// label, a role taint (installers that taint control-plane nodes but label
// them otherwise, or not at all), or, within Decide, a group's
// controlPlaneSelector.
func (n Node) ControlPlane() bool {
	_, cp := n.Labels[rebootv1.LabelControlPlane]
	_, master := n.Labels[rebootv1.LabelMaster]
	return cp || master || n.ControlPlaneTaint || n.selectedControlPlane
}

// HoldsSlot says whether the node has been approved and its reboot not yet
// verified, so it takes one slot of its group's budget whatever its state.
func (n Node) HoldsSlot() bool {
	_, inProgress := n.Annotations[rebootv1.AnnotationInProgress]
	_, now := n.Annotations[rebootv1.AnnotationNow]
	return inProgress || now || n.Reserved
}

// Needs says whether the node asks for a reboot.
func (n Node) Needs() bool {
	return rebootv1.Needed(n.Annotations)
}

// Unavailable says whether the node counts against its group's budget: not
// Ready (False or Unknown), cordoned by anyone, or holding a slot.
func (n Node) Unavailable() bool {
	return n.Ready != corev1.ConditionTrue || n.Unschedulable || n.HoldsSlot()
}

// Failed says whether the node carries the failed annotation.
func (n Node) Failed() bool {
	_, ok := n.Annotations[rebootv1.AnnotationFailed]
	return ok
}

// Stuck says whether the node was ordered to reboot more than timeout before
// now and still holds its slot.
func (n Node) Stuck(now time.Time, timeout time.Duration) bool {
	ordered, ok := n.time(rebootv1.AnnotationNow)
	return ok && n.HoldsSlot() && now.Sub(ordered) > timeout
}

func (n Node) time(annotation string) (time.Time, bool) {
	v, ok := n.Annotations[annotation]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, v)
	return t, err == nil
}

// Snapshot is everything a decision is made from.
type Snapshot struct {
	Groups []rebootv1.RebootGroup
	Nodes  []Node
	// Absent are slots the approvals ledger holds for nodes that cannot show
	// them: a Node deleted (or re-registered without its annotations) while
	// its reboot was under way. Each counts against its group's budget until
	// the controller lets it go at the group's reboot timeout.
	Absent []Absent
	// Held says, by group name, which of a group's healthGates fails and
	// why (internal/rebootgate); such a group approves nothing.
	Held map[string]Hold
	Now  time.Time
}

// Hold is a failing health gate: its condition reason
// (rebootv1.ReasonEvictedPodsNotReady, ...) and what was found.
type Hold struct {
	Reason  string
	Message string
}

// Absent is a slot held for a node the snapshot cannot attribute by labels.
type Absent struct {
	Node         string
	Group        string
	ControlPlane bool
}

// Reason says why a node that needs a reboot was not approved; the controller
// uses it as an Event reason and a metric label.
type Reason string

// Reasons a needing node waits.
const (
	// ReasonMaxUnavailable: the group has no free slot in its budget.
	ReasonMaxUnavailable Reason = "MaxUnavailable"
	// ReasonOutsideWindow: no maintenance window of the group is open.
	ReasonOutsideWindow Reason = "OutsideWindow"
	// ReasonPaused: the group has spec.paused set.
	ReasonPaused Reason = "Paused"
	// ReasonHalted: the group reached maxFailures.
	ReasonHalted Reason = "Halted"
	// ReasonControlPlaneWaits: a worker is rebooting or approved, and
	// control-plane nodes never reboot together with workers.
	ReasonControlPlaneWaits Reason = "ControlPlaneWaitsForWorkers"
	// ReasonControlPlaneBusy: another control-plane node is unavailable or
	// approved; they reboot one at a time.
	ReasonControlPlaneBusy Reason = "ControlPlaneBusy"
	// ReasonWorkerWaits: a control-plane node is rebooting.
	ReasonWorkerWaits Reason = "WaitsForControlPlane"
	// ReasonOverlapping: several groups select the node.
	ReasonOverlapping Reason = "OverlappingGroups"
	// ReasonInvalidGroup: the group's spec cannot be used (e.g. an unknown
	// time zone).
	ReasonInvalidGroup Reason = "InvalidGroup"
	// ReasonNotReady: the node is not Ready, so its agent could not act.
	ReasonNotReady Reason = "NotReady"
	// ReasonRetryLater: the node's last drain timed out and its
	// retry-after time has not come.
	ReasonRetryLater Reason = "RetryLater"
	// ReasonFailed: the node's last reboot failed.
	ReasonFailed Reason = "Failed"
	// ReasonBlockingPod: a pod matching the group's
	// drain.blockingPodSelector runs on the node.
	ReasonBlockingPod Reason = "BlockingPod"
	// ReasonNoBootID: the node reports no boot ID, so a reboot could never
	// be verified; it would stay cordoned and end up stuck.
	ReasonNoBootID Reason = "NoBootID"
	// ReasonAgentNotAlive: the node's reboot-agent has not renewed its
	// heartbeat lately, so nothing would reboot the node once drained; it
	// would stay cordoned and end up stuck.
	ReasonAgentNotAlive Reason = "AgentNotAlive"
	// ReasonHealthGate: one of the group's healthGates fails.
	ReasonHealthGate Reason = "HealthGate"
)

// Wait is a needing node that was not approved, and why, in a message fit
// for an Event or `kubectl kubext reboot plan`.
type Wait struct {
	Node    string
	Group   string
	Reason  Reason
	Message string
}

// Overlap is a node selected by more than one group, which none of them
// reboots.
type Overlap struct {
	Node   string
	Groups []string
}

// GroupDecision is the state and the decision for one group.
type GroupDecision struct {
	// Name is the group's name; DefaultGroupName for the default group.
	Name string
	// Implicit is true for the default group when no RebootGroup named
	// "default" exists.
	Implicit bool
	// Err says why the group's spec cannot be used; such a group approves
	// nothing.
	Err error
	// Nodes are the names of the nodes the group selects, sorted, including
	// nodes it shares with other groups (Overlapping).
	Nodes []string
	// MaxUnavailable is the resolved budget.
	MaxUnavailable int
	// Unavailable are the nodes counted against the budget before the
	// approvals.
	Unavailable []string
	// Rebooting are the nodes holding a slot, before the approvals.
	Rebooting []string
	// Stuck are rebooting nodes past their reboot timeout.
	Stuck []string
	// Failed are nodes with a failed or stuck reboot.
	Failed []string
	// Done counts nodes whose last reboot was verified and need no other.
	Done int
	// Approved are the nodes approved now, in order.
	Approved []string
	// Waiting are the needing nodes not approved, in order, with reasons.
	Waiting []Wait
	// Overlapping are the group's nodes that other groups select too.
	Overlapping []Overlap
	// InWindow says whether a maintenance window is open; NextWindow is when
	// the next one opens (zero when one is open or none can be computed).
	InWindow   bool
	NextWindow time.Time
	// Paused and Halted reflect spec.paused and maxFailures.
	Paused, Halted bool
	// Held is the group's failing health gate, if any.
	Held *Hold
}

// Decision is the outcome of Decide.
type Decision struct {
	// Groups are sorted by name.
	Groups []GroupDecision
	// Approved are the nodes to approve now, across groups, in order.
	Approved []string
	// Overlapping are the nodes no group handles because several select
	// them.
	Overlapping []Overlap
	// ControlPlane are the control-plane nodes, sorted: by role label or
	// taint, or selected by a group's controlPlaneSelector.
	ControlPlane []string
}

// IsControlPlane says whether the decision counted the node as a
// control-plane node.
func (d Decision) IsControlPlane(node string) bool {
	_, found := slices.BinarySearch(d.ControlPlane, node)
	return found
}

// Group returns the decision for the named group, or nil.
func (d Decision) Group(name string) *GroupDecision {
	for i := range d.Groups {
		if d.Groups[i].Name == name {
			return &d.Groups[i]
		}
	}
	return nil
}

// Waiting returns every needing node that was not approved, group by group;
// a node of overlapping groups is listed once, under the first.
func (d Decision) Waiting() []Wait {
	var out []Wait
	seen := map[string]bool{}
	for _, g := range d.Groups {
		for _, w := range g.Waiting {
			if !seen[w.Node] {
				seen[w.Node] = true
				out = append(out, w)
			}
		}
	}
	return out
}

// group is a parsed RebootGroup.
type group struct {
	*GroupDecision
	spec     rebootv1.RebootGroupSpec
	selector labels.Selector // nil for the default group
	windows  Windows
	members  []*Node
	unavail  int
}

// Decide approves the needing nodes that may start a reboot now and says why
// the others wait. Approvals never take a group over its maxUnavailable
// (counting every unavailable node once), and none are made in a group
// that is already over it; control-plane nodes are approved one at a time,
// only when no worker is rebooting or approved, and workers wait while a
// control-plane node reboots.
func Decide(s Snapshot) Decision {
	// Decide marks nodes (selectedControlPlane): on its own copy.
	s.Nodes = slices.Clone(s.Nodes)
	groups, byNode, overlaps := assign(s)
	var d Decision
	d.Overlapping = overlaps
	markControlPlane(groups)

	var cpBusy []string // control-plane nodes unavailable for any reason
	var cpRebooting, workerRebooting bool
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.ControlPlane() {
			d.ControlPlane = append(d.ControlPlane, n.Name)
		}
		if n.ControlPlane() && n.Unavailable() {
			cpBusy = append(cpBusy, n.Name)
		}
		if n.HoldsSlot() {
			cpRebooting = cpRebooting || n.ControlPlane()
			workerRebooting = workerRebooting || !n.ControlPlane()
		}
	}
	slices.Sort(d.ControlPlane)
	for _, a := range s.Absent {
		if a.ControlPlane {
			cpBusy = append(cpBusy, a.Node)
		}
		cpRebooting = cpRebooting || a.ControlPlane
		workerRebooting = workerRebooting || !a.ControlPlane
	}
	slices.Sort(cpBusy)

	type candidate struct {
		g *group
		n *Node
	}
	var workers, cps []candidate
	for _, g := range groups {
		g.evaluate(s.Now, s.Absent)
		if h, ok := s.Held[g.Name]; ok {
			g.Held = &h
		}
		for _, n := range g.members {
			if !n.Needs() || n.HoldsSlot() {
				continue
			}
			if len(byNode[n.Name]) > 1 {
				g.wait(n, ReasonOverlapping, "Overlapping groups: %s", strings.Join(byNode[n.Name], ", "))
				continue
			}
			if g.blocked(n, s.Now) {
				continue
			}
			if n.ControlPlane() {
				cps = append(cps, candidate{g, n})
			} else {
				workers = append(workers, candidate{g, n})
			}
		}
	}

	workerApproved := false
	for _, c := range workers {
		if cpRebooting {
			c.g.wait(c.n, ReasonWorkerWaits, "Waits for control-plane nodes to finish rebooting")
			continue
		}
		if c.g.tryApprove(c.n) {
			workerApproved = true
		}
	}
	cpApproved := false
	for _, c := range cps {
		switch {
		case workerRebooting || workerApproved:
			c.g.wait(c.n, ReasonControlPlaneWaits, "Control-plane node waits for workers")
		case cpApproved || len(cpBusy) > 1 || len(cpBusy) == 1 && cpBusy[0] != c.n.Name:
			c.g.wait(c.n, ReasonControlPlaneBusy, "Control-plane nodes reboot one at a time; another is unavailable")
		default:
			cpApproved = c.g.tryApprove(c.n)
		}
	}

	for _, g := range groups {
		d.Groups = append(d.Groups, *g.GroupDecision)
		d.Approved = append(d.Approved, g.Approved...)
	}
	return d
}

// markControlPlane marks the members each group's controlPlaneSelector
// selects; a selector that does not parse marks nothing and is the group's
// error (evaluate).
func markControlPlane(groups []*group) {
	for _, g := range groups {
		if g.spec.ControlPlaneSelector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(g.spec.ControlPlaneSelector)
		if err != nil || sel.Empty() {
			continue
		}
		for _, n := range g.members {
			if sel.Matches(labels.Set(n.Labels)) {
				n.selectedControlPlane = true
			}
		}
	}
}

// assign parses the groups and gives every node to the one group that
// selects it, or to the default group when none does. A node selected by
// several groups is a member of each (it counts against each budget) but is
// never approved.
func assign(s Snapshot) ([]*group, map[string][]string, []Overlap) {
	var groups []*group
	var def *group
	var badSelector []string
	for i := range s.Groups {
		rg := &s.Groups[i]
		g := &group{GroupDecision: &GroupDecision{Name: rg.Name}, spec: rg.Spec}
		if rg.Name == rebootv1.DefaultGroupName {
			def = g
		} else {
			sel, err := metav1.LabelSelectorAsSelector(rg.Spec.NodeSelector)
			if err != nil {
				g.Err = fmt.Errorf("spec.nodeSelector: %w", err)
				badSelector = append(badSelector, rg.Name)
			} else if rg.Spec.NodeSelector == nil {
				sel = labels.Everything()
			}
			g.selector = sel
		}
		groups = append(groups, g)
	}
	if def == nil {
		def = &group{GroupDecision: &GroupDecision{Name: rebootv1.DefaultGroupName, Implicit: true}}
		groups = append(groups, def)
	}
	if len(badSelector) > 0 && def.Err == nil {
		def.Err = fmt.Errorf("the nodeSelector of group %s is invalid, so it is unknown which nodes belong to the default group", strings.Join(badSelector, ", "))
	}
	slices.SortFunc(groups, func(a, b *group) int { return strings.Compare(a.Name, b.Name) })

	byNode := map[string][]string{}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		set := labels.Set(n.Labels)
		var in []*group
		for _, g := range groups {
			if g.selector != nil && g.selector.Matches(set) {
				in = append(in, g)
			}
		}
		if len(in) == 0 {
			in = []*group{def}
		}
		for _, g := range in {
			g.members = append(g.members, n)
			byNode[n.Name] = append(byNode[n.Name], g.Name)
		}
	}
	var overlaps []Overlap
	for _, g := range groups {
		slices.SortFunc(g.members, func(a, b *Node) int { return strings.Compare(a.Name, b.Name) })
		for _, n := range g.members {
			g.Nodes = append(g.Nodes, n.Name)
			if len(byNode[n.Name]) > 1 {
				g.Overlapping = append(g.Overlapping, Overlap{Node: n.Name, Groups: byNode[n.Name]})
			}
		}
	}
	for name, gs := range byNode {
		if len(gs) > 1 {
			overlaps = append(overlaps, Overlap{Node: name, Groups: gs})
		}
	}
	slices.SortFunc(overlaps, func(a, b Overlap) int { return strings.Compare(a.Node, b.Node) })
	return groups, byNode, overlaps
}

// evaluate resolves the group's budget, windows and failure count and sorts
// its members into approval order.
func (g *group) evaluate(now time.Time, absent []Absent) {
	var err error
	g.MaxUnavailable, err = Budget(g.spec.MaxUnavailable, len(g.members))
	if err != nil && g.Err == nil {
		g.Err = err
	}
	if g.windows, err = ParseWindows(g.spec.Windows); err != nil && g.Err == nil {
		g.Err = err
	}
	if _, err := metav1.LabelSelectorAsSelector(g.spec.Drain.BlockingPodSelector); err != nil && g.Err == nil {
		g.Err = fmt.Errorf("spec.drain.blockingPodSelector: %w", err)
	}
	if _, err := metav1.LabelSelectorAsSelector(g.spec.ControlPlaneSelector); err != nil && g.Err == nil {
		g.Err = fmt.Errorf("spec.controlPlaneSelector: %w", err)
	}
	g.InWindow = g.windows.InWindow(now)
	if !g.InWindow && g.Err == nil {
		g.NextWindow = g.windows.NextWindowStart(now)
	}
	g.Paused = g.spec.Paused
	timeout := DefaultRebootTimeout
	if g.spec.RebootTimeoutSeconds > 0 {
		timeout = time.Duration(g.spec.RebootTimeoutSeconds) * time.Second
	}
	for _, n := range g.members {
		if n.Unavailable() {
			g.Unavailable = append(g.Unavailable, n.Name)
		}
		if n.HoldsSlot() {
			g.Rebooting = append(g.Rebooting, n.Name)
		}
		stuck := n.Stuck(now, timeout)
		if stuck {
			g.Stuck = append(g.Stuck, n.Name)
		}
		if stuck || n.Failed() {
			g.Failed = append(g.Failed, n.Name)
		}
		if _, ok := n.Annotations[rebootv1.AnnotationRebootedAt]; ok && !n.Needs() && !n.HoldsSlot() {
			g.Done++
		}
	}
	// Slots held for absent nodes count as unavailable and rebooting;
	// a node that is also present (re-registered) counts once more, which
	// errs on the safe side.
	for _, a := range absent {
		if a.Group == g.Name {
			g.Unavailable = append(g.Unavailable, a.Node)
			g.Rebooting = append(g.Rebooting, a.Node)
		}
	}
	g.unavail = len(g.Unavailable)
	maxFailures := int32(DefaultMaxFailures)
	if g.spec.MaxFailures != nil {
		maxFailures = *g.spec.MaxFailures
	}
	g.Halted = maxFailures > 0 && len(g.Failed) >= int(maxFailures)

	// Longest-waiting first; a node without needed-since has only just
	// been noticed.
	since := func(n *Node) time.Time {
		if t, ok := n.time(rebootv1.AnnotationNeededSince); ok {
			return t
		}
		return now
	}
	slices.SortStableFunc(g.members, func(a, b *Node) int {
		return cmp.Or(since(a).Compare(since(b)), strings.Compare(a.Name, b.Name))
	})
}

// blocked records why n may not start a reboot for reasons of its own or of
// its group, before budgets are considered.
func (g *group) blocked(n *Node, now time.Time) bool {
	maxFailures := int32(DefaultMaxFailures)
	if g.spec.MaxFailures != nil {
		maxFailures = *g.spec.MaxFailures
	}
	switch {
	case g.Err != nil:
		g.wait(n, ReasonInvalidGroup, "Group %s cannot be used: %v", g.Name, g.Err)
	case n.Failed():
		g.wait(n, ReasonFailed, "Last reboot failed (%s); remove the %s annotation to retry", n.Annotations[rebootv1.AnnotationFailed], rebootv1.AnnotationFailed)
	case g.Paused:
		g.wait(n, ReasonPaused, "Paused")
	case g.Halted:
		g.wait(n, ReasonHalted, "Halted after %d failures", maxFailures)
	case !g.InWindow:
		g.wait(n, ReasonOutsideWindow, "Outside maintenance window (next opens at %s)", g.NextWindow.UTC().Format(time.RFC3339))
	case g.Held != nil:
		g.wait(n, ReasonHealthGate, "Health gate holds the group (%s): %s", g.Held.Reason, g.Held.Message)
	case n.Ready != corev1.ConditionTrue:
		g.wait(n, ReasonNotReady, "Node is not Ready")
	case n.BootID == "":
		g.wait(n, ReasonNoBootID, "Node reports no boot ID (status.nodeInfo.bootID), so its reboot could not be verified")
	case n.AgentDown:
		g.wait(n, ReasonAgentNotAlive, "The node's reboot-agent is not alive (%s): nothing would reboot the node once drained", n.AgentDownWhy)
	case g.blockingPod(n) != "":
		g.wait(n, ReasonBlockingPod, "Pod %s runs on the node and matches drain.blockingPodSelector", g.blockingPod(n))
	default:
		if t, ok := n.time(rebootv1.AnnotationRetryAfter); ok && now.Before(t) {
			g.wait(n, ReasonRetryLater, "Drain timed out; retrying after %s", t.UTC().Format(time.RFC3339))
			return true
		}
		return false
	}
	return true
}

// tryApprove approves n if that keeps the group within its budget. A node
// that is already unavailable (cordoned by an admin) costs nothing more, but
// nothing is approved while the group is over budget.
func (g *group) tryApprove(n *Node) bool {
	after := g.unavail
	if !n.Unavailable() {
		after++
	}
	if g.unavail > g.MaxUnavailable || after > g.MaxUnavailable {
		g.wait(n, ReasonMaxUnavailable, "Max unavailable reached (%d of %d unavailable)", g.unavail, g.MaxUnavailable)
		return false
	}
	g.unavail = after
	g.Approved = append(g.Approved, n.Name)
	return true
}

// blockingPod names the first pod on n that the group's blockingPodSelector
// selects, or returns "".
func (g *group) blockingPod(n *Node) string {
	if g.spec.Drain.BlockingPodSelector == nil || len(n.Pods) == 0 {
		return ""
	}
	sel, err := metav1.LabelSelectorAsSelector(g.spec.Drain.BlockingPodSelector)
	if err != nil || sel.Empty() {
		return ""
	}
	for _, p := range n.Pods {
		if sel.Matches(labels.Set(p.Labels)) {
			return p.Namespace + "/" + p.Name
		}
	}
	return ""
}

func (g *group) wait(n *Node, r Reason, format string, args ...any) {
	g.Waiting = append(g.Waiting, Wait{Node: n.Name, Group: g.Name, Reason: r, Message: fmt.Sprintf(format, args...)})
}

// Budget resolves maxUnavailable against a group of size nodes: a number
// as is, a percentage rounded down but at least 1. Unset means
// DefaultMaxUnavailable.
func Budget(maxUnavailable *intstr.IntOrString, size int) (int, error) {
	switch {
	case maxUnavailable == nil:
		return rebootv1.DefaultMaxUnavailable, nil
	case maxUnavailable.Type == intstr.String && !validPercent(maxUnavailable.StrVal):
		return 0, fmt.Errorf("spec.maxUnavailable %q must be a number or a percentage from 1%% to 100%%", maxUnavailable.StrVal)
	case maxUnavailable.Type == intstr.Int && maxUnavailable.IntVal < 1:
		return 0, fmt.Errorf("spec.maxUnavailable must be at least 1")
	}
	v, err := intstr.GetScaledValueFromIntOrPercent(maxUnavailable, size, false)
	if err != nil {
		return 0, fmt.Errorf("spec.maxUnavailable: %w", err)
	}
	return max(v, 1), nil
}

func validPercent(s string) bool {
	digits, ok := strings.CutSuffix(s, "%")
	if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return false
	}
	p, err := strconv.Atoi(digits)
	return err == nil && p >= 1 && p <= 100
}
