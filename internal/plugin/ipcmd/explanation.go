package ipcmd

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/kubectl/pkg/util/podutils"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/ipam"
)

// shownEvents is how many of the latest events explain prints.
const shownEvents = 10

// facts is everything `ip explain` reports on, fetched in one go.
type facts struct {
	ip *ipv1.IP
	// pool is the IP's IPPool; nil when it does not exist.
	pool *ipv1.IPPool
	// pods are the pods claiming the IP.
	pods []corev1.Pod
	// nodes are the nodes involved, by name; a missing entry was not found.
	nodes map[string]*corev1.Node
	// leases are the agents' heartbeat Leases by node name; a missing entry
	// was not found.
	leases map[string]*coordinationv1.Lease
	// leaseNamespace is where the heartbeat Leases live.
	leaseNamespace string
	// namespaceLabels are the labels of the claiming pods' namespaces,
	// read only when the pool selects namespaces by label.
	namespaceLabels map[string]map[string]string
	// events are the IP's events, oldest first.
	events []eventsv1.Event
	now    time.Time
}

// claimPolicy is who may claim the IP, as the controller applies it.
func (f *facts) claimPolicy() ipam.ClaimPolicy {
	policy := ipam.ClaimPolicy{IP: f.ip.Spec.Claimants}
	if f.pool != nil {
		policy.Pool = f.pool.Spec.Claimants
	}
	return policy
}

// agent is what a heartbeat Lease says about a node's agent.
type agent struct {
	alive bool
	// state is a short phrase: "alive, renewed 1s ago (lease 5s)".
	state string
}

// agentOf judges a node's agent by its Lease: alive while the last renewal
// is younger than the lease duration, by this machine's clock.
func (f *facts) agentOf(node string) agent {
	l := f.leases[node]
	if l == nil {
		return agent{state: fmt.Sprintf("NOT ALIVE: no Lease %s in namespace %s (is ip-agent running on this node?)",
			leaseName(node), f.leaseNamespace)}
	}
	if l.Spec.RenewTime == nil {
		return agent{state: fmt.Sprintf("NOT ALIVE: Lease %s was never renewed", l.Name)}
	}
	d := time.Second
	if s := l.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
		d = time.Duration(*s) * time.Second
	}
	age := f.now.Sub(l.Spec.RenewTime.Time)
	if age < d {
		return agent{alive: true, state: fmt.Sprintf("alive, renewed %s ago (lease %s)", since(age), d)}
	}
	return agent{state: fmt.Sprintf("NOT ALIVE: last renewed %s ago, lease %s ran out %s ago",
		since(age), d, since(age-d))}
}

// nodeSelector is the pool's node selector; nil when every node is allowed
// or the pool is unknown, and an error text when it cannot be parsed.
func (f *facts) nodeSelector() (labels.Selector, string) {
	if f.pool == nil || f.pool.Spec.NodeSelector == nil {
		return nil, ""
	}
	sel, err := metav1.LabelSelectorAsSelector(f.pool.Spec.NodeSelector)
	if err != nil {
		return nil, fmt.Sprintf("the pool's nodeSelector is invalid: %v", err)
	}
	return sel, ""
}

// role says what a claiming pod is to the IP: the holder, a standby, or
// why it cannot hold the IP. The checks are those of the controller
// (internal/ipam.ChooseHolder), in the same order.
func (f *facts) role(p *corev1.Pod) string {
	key := p.Namespace + "/" + p.Name
	if key == f.ip.Status.Pod {
		switch why := f.ineligible(p); {
		case f.ip.Status.Node == "" && f.ip.Status.AttachedNode != "":
			return "HOLDER (next): waiting for node " + f.ip.Status.AttachedNode + " to release the address"
		case why != "":
			return "HOLDER, but no longer eligible: " + why + " (the controller will hand over)"
		}
		return "HOLDER"
	}
	if i := slices.Index(f.ip.Status.Standbys, key); i >= 0 {
		return fmt.Sprintf("standby #%d", i+1)
	}
	if why := f.ineligible(p); why != "" {
		return "not eligible: " + why
	}
	return "eligible, not listed as standby yet (the controller has not caught up)"
}

// ineligible says why a pod cannot hold the IP, or "" when it can.
func (f *facts) ineligible(p *corev1.Pod) string {
	if why := f.claimPolicy().Allows(ipam.ClaimRequest{Namespace: p.Namespace,
		NamespaceLabels: f.namespaceLabels[p.Namespace], PodLabels: p.Labels}); why != "" {
		return "REFUSED, may not claim this IP: " + why
	}
	if why := ipam.Unfit(f.ip.Status.Address, p); why != "" {
		return "REFUSED: " + why
	}
	node := p.Spec.NodeName
	switch {
	case !p.DeletionTimestamp.IsZero():
		return "being deleted"
	case node == "":
		return "not scheduled to a node"
	}
	sel, invalid := f.nodeSelector()
	if invalid != "" {
		return invalid
	}
	if sel != nil {
		n := f.nodes[node]
		if n == nil {
			return fmt.Sprintf("node %s not found", node)
		}
		if !sel.Matches(labels.Set(n.Labels)) {
			return fmt.Sprintf("node %s is excluded by the pool's nodeSelector (%s)", node, sel)
		}
	}
	if !f.agentOf(node).alive {
		return fmt.Sprintf("the agent on node %s is not alive", node)
	}
	if !podutils.IsPodReady(p) {
		return "not Ready"
	}
	if p.Status.PodIP == "" {
		return "has no pod IP yet"
	}
	return ""
}

// explain tells a person why an IP is where it is, or why it is not
// attached anywhere, and what to look at next.
func explain(f facts) string {
	var b strings.Builder
	writeSummary(&b, &f)
	writeAddress(&b, &f)
	writeConditions(&b, &f)
	writePlacement(&b, &f)
	writeEC2(&b, &f)
	writeNodes(&b, &f)
	writePods(&b, &f)
	writeEvents(&b, &f)
	return b.String()
}

func writeSummary(w io.Writer, f *facts) {
	ip := f.ip
	addr := ip.Status.Address
	if addr == "" {
		addr = "no address yet"
	}
	fmt.Fprintf(w, "IP %s: %s\n", ip.Name, addr)
	ready := meta.FindStatusCondition(ip.Status.Conditions, ipv1.ConditionReady)
	switch {
	case ready == nil:
		fmt.Fprintln(w, "Status: NOT READY: the controller has not processed this IP yet. Is the kubext manager running?")
	case ready.Status == metav1.ConditionTrue:
		fmt.Fprintf(w, "Status: READY: %s.\n", strings.TrimSuffix(ready.Message, "."))
	default:
		fmt.Fprintf(w, "Status: NOT READY (%s): %s.\n", ready.Reason, strings.TrimSuffix(ready.Message, "."))
	}
	for _, line := range diagnose(f, ready) {
		fmt.Fprintln(w, "  - "+line)
	}
}

// diagnose turns the IP's state into advice: what is going on and what to
// check.
func diagnose(f *facts, ready *metav1.Condition) []string {
	ip := f.ip
	var out []string
	if !ip.DeletionTimestamp.IsZero() {
		out = append(out, fmt.Sprintf("The IP is being deleted (since %s ago); it is kept until its address is detached from every node.",
			since(f.now.Sub(ip.DeletionTimestamp.Time))))
	}
	if ip.Status.ObservedGeneration < ip.Generation && ready != nil {
		out = append(out, fmt.Sprintf("The status describes generation %d but the spec is at generation %d: the controller has not caught up yet.",
			ip.Status.ObservedGeneration, ip.Generation))
	}
	if to := ip.Annotations[ipv1.AnnotationMoveTo]; to != "" {
		out = append(out, fmt.Sprintf("A move to %s is pending (annotation %s); the controller removes it once handled.", to, ipv1.AnnotationMoveTo))
	}
	if ready == nil {
		return out
	}
	pool := ip.Status.Pool
	if pool == "" {
		pool = ip.Spec.Pool
	}
	switch ready.Reason {
	case ipv1.ReasonReady:
		if len(ip.Status.Witnesses) > 0 && ip.Status.AttachedGeneration == 0 {
			out = append(out, fmt.Sprintf("Held on node %s's Lease, not on its witnesses' word: none of %s vouched in time. Open UDP port 7946 (the ip-agents' --witness-port) between the nodes, and check that their addresses are in the ip-agent ConfigMap's witness-allow-from; until then it fails over in about 2 s and goes dark while the API server stalls.",
				ip.Status.Node, strings.Join(ip.Status.Witnesses, ", ")))
		}
		if len(ip.Status.Witnesses) == 0 && ip.Status.AttachedGeneration == 0 && f.pool != nil && f.pool.Spec.Failover == ipv1.FailoverWitness {
			out = append(out, fmt.Sprintf("Held on node %s's Lease, for want of witnesses: no other node that pool %s selects had a live agent when it was placed. The controller names witnesses as soon as one has, and the holder then moves to their word; until then it fails over in about 2 s and goes dark while the API server stalls.",
				ip.Status.Node, f.pool.Name))
		}
		if len(ip.Status.Standbys) == 0 {
			out = append(out, fmt.Sprintf("There is no standby: if node %s fails, the address waits until a claiming pod is Ready on another node.", ip.Status.Node))
		}
	case ipv1.ReasonNoClaimant:
		out = append(out, fmt.Sprintf("No pod claims this IP. Add the annotation %s: %s to the pods that should hold it.", ipv1.AnnotationIP, ip.Name))
	case ipv1.ReasonNoEligibleNode:
		out = append(out, "Pods claim this IP but none can hold it; \"Claiming pods\" below says why for each.")
	case ipv1.ReasonNodeLost:
		out = append(out, "The holder's node stopped renewing its heartbeat (or its witnesses declared it silent) and no standby can take over. Make another claiming pod Ready on a healthy node, or fix the node.")
	case ipv1.ReasonWaitingForAgent:
		out = append(out, agentAdvice(f, ip.Status.Node, "attach"))
	case ipv1.ReasonDetaching:
		if att := ip.Status.AttachedNode; att != "" {
			out = append(out, fmt.Sprintf("Node %s still answers for the address and must release it before another node may take it.", att))
			out = append(out, agentAdvice(f, att, "release"))
		}
	case ipv1.ReasonPoolNotFound:
		out = append(out, fmt.Sprintf("Create the IPPool %q, or set spec.pool to an existing pool (kubectl get ippools).", pool))
	case ipv1.ReasonPoolExhausted:
		out = append(out, fmt.Sprintf("Pool %s has no free address: add a range to its spec.addresses or delete an unused IP.", pool))
	case ipv1.ReasonAddressInUse:
		out = append(out, "Another IP (or a Service ClusterIP) holds this address; choose another address or delete the other holder.")
	case ipv1.ReasonAddressOutsidePool:
		out = append(out, fmt.Sprintf("spec.address is not one that pool %s hands out; fix spec.address or the pool's spec.addresses.", pool))
	}
	return out
}

// agentAdvice says whether the agent that must act on a node is alive.
func agentAdvice(f *facts, node, action string) string {
	a := f.agentOf(node)
	if a.alive {
		return fmt.Sprintf("The agent on node %s is alive; it should %s the address within seconds. If this lasts, read its logs (ip-agent pod on %s).", node, action, node)
	}
	if action == "release" {
		return fmt.Sprintf("The agent on node %s is %s. An agent that cannot renew fences itself; the controller moves on once the lease has run out.", node, a.state)
	}
	return fmt.Sprintf("The agent on node %s is %s. Check the ip-agent pod on that node (namespace %s).", node, a.state, f.leaseNamespace)
}

func writeAddress(w io.Writer, f *facts) {
	ip := f.ip
	fmt.Fprintln(w, "\nAddress:")
	tw := table(w)
	row(tw, "Address", orDash(ip.Status.Address)+specNote(ip))
	pool := ip.Status.Pool
	if pool == "" {
		pool = ip.Spec.Pool
	}
	switch {
	case pool == "":
		row(tw, "Pool", "none found")
	case f.pool == nil:
		row(tw, "Pool", pool+": NOT FOUND")
	default:
		p := f.pool
		state := "Ready"
		if c := meta.FindStatusCondition(p.Status.Conditions, ipv1.ConditionReady); c == nil {
			state = "not processed yet"
		} else if c.Status != metav1.ConditionTrue {
			state = fmt.Sprintf("NOT READY (%s: %s)", c.Reason, c.Message)
		}
		row(tw, "Pool", fmt.Sprintf("%s: %s, provider %s", pool, state, orDash(string(p.Spec.Provider))))
		row(tw, "Pool use", fmt.Sprintf("size %d, allocated %d, available %d", p.Status.Size, p.Status.Allocated, p.Status.Available))
		nodes := "all nodes"
		if sel, invalid := f.nodeSelector(); invalid != "" {
			nodes = invalid
		} else if sel != nil {
			nodes = "nodes matching " + sel.String()
		}
		row(tw, "Pool nodes", nodes)
	}
	_ = tw.Flush()
}

// specNote mentions what the spec asks for when it differs from the status.
func specNote(ip *ipv1.IP) string {
	if ip.Spec.Address != "" && ip.Spec.Address != ip.Status.Address {
		return fmt.Sprintf(" (spec.address asks for %s)", ip.Spec.Address)
	}
	return ""
}

func writeConditions(w io.Writer, f *facts) {
	fmt.Fprintln(w, "\nConditions:")
	if len(f.ip.Status.Conditions) == 0 {
		fmt.Fprintln(w, "  none yet")
		return
	}
	tw := table(w)
	row(tw, "TYPE", "STATUS", "REASON", "SINCE", "MESSAGE")
	for _, t := range []string{ipv1.ConditionAllocated, ipv1.ConditionAttached, ipv1.ConditionReady} {
		if c := meta.FindStatusCondition(f.ip.Status.Conditions, t); c != nil {
			row(tw, c.Type, string(c.Status), c.Reason, since(f.now.Sub(c.LastTransitionTime.Time)), c.Message)
		}
	}
	_ = tw.Flush()
}

func writePlacement(w io.Writer, f *facts) {
	st := f.ip.Status
	fmt.Fprintln(w, "\nPlacement:")
	tw := table(w)
	row(tw, "Holder", orDash(st.Pod), "status.pod: the claiming pod the address is attached for")
	row(tw, "Node", orDash(st.Node), "status.node: where the controller wants the address")
	row(tw, "Attached", orDash(st.AttachedNode), "status.attachedNode: the node whose agent may answer for it")
	row(tw, "Forwards to", orDash(st.AttachedPod), "status.attachedPod: the pod that agent confirmed traffic reaches")
	row(tw, "Standbys", orDash(strings.Join(st.Standbys, ", ")), "take over at once, in this order")
	row(tw, "Witnesses", orDash(strings.Join(st.Witnesses, ", ")), "status.witnesses: the nodes that vouch for the holder (Witness failover)")
	row(tw, "Held on", holdRuleOf(st), "status.attachedGeneration: what keeps the attached node's hold")
	last := "never"
	if st.LastMoveTime != nil {
		last = since(f.now.Sub(st.LastMoveTime.Time)) + " ago"
	}
	row(tw, "Last move", last)
	_ = tw.Flush()
	switch {
	case st.Node != "" && st.AttachedNode == st.Node:
		fmt.Fprintf(w, "  The agent on %s has confirmed the address.\n", st.Node)
	case st.Node == "" && st.AttachedNode != "":
		fmt.Fprintf(w, "  Moving: node %s must release the address before it goes to %s.\n", st.AttachedNode, orNone(st.Pod))
	case st.Node != "" && st.AttachedNode == "":
		fmt.Fprintf(w, "  Attaching: waiting for the agent on %s to confirm.\n", st.Node)
	case st.Node == "" && st.AttachedNode == "":
		fmt.Fprintln(w, "  The address is attached to no node.")
	}
}

// holdRuleOf says what keeps the attached node's hold: its witnesses'
// word (in its generation), or its heartbeat Lease.
func holdRuleOf(st ipv1.IPStatus) string {
	switch {
	case st.AttachedNode == "":
		return "-"
	case st.AttachedGeneration > 0:
		return fmt.Sprintf("its witnesses' word (generation %d): it moves once a majority of them declare it silent", st.AttachedGeneration)
	case len(st.Witnesses) > 0:
		return "its heartbeat Lease: its witnesses did not vouch for it in time (WitnessesUnreachable)"
	default:
		return "its heartbeat Lease: it moves once the Lease is not renewed for its duration"
	}
}

// writeEC2 shows where EC2 routes the address of an IP of an aws pool,
// from what the controller recorded in status.aws.
func writeEC2(w io.Writer, f *facts) {
	st := f.ip.Status.AWS
	if st == nil && (f.pool == nil || f.pool.Spec.Provider != ipv1.ProviderAWS) {
		return
	}
	fmt.Fprintln(w, "\nEC2:")
	if st == nil {
		fmt.Fprintln(w, "  Nothing recorded yet: the controller has not handled this IP's address in EC2.")
		return
	}
	tw := table(w)
	mode := "private: the address is a secondary private IP of the holder's ENI"
	if st.PublicIPv4Pool != "" {
		mode = "public: an Elastic IP from BYOIP pool " + st.PublicIPv4Pool + ", associated with a secondary private IP"
	}
	row(tw, "Mode", mode)
	row(tw, "Routed to", orDash(st.Node), "status.aws.node: the node EC2 was last verified to route the address to")
	row(tw, "Instance", orDash(st.InstanceID))
	row(tw, "VPC", orDash(st.VPCID))
	row(tw, "ENI", orDash(st.NetworkInterfaceID))
	row(tw, "Private IP", orDash(st.PrivateIP))
	if st.PublicIPv4Pool != "" || st.AllocationID != "" {
		row(tw, "Allocation", orDash(st.AllocationID), "kept while no node holds the address; released on delete only if kubext allocated it")
		row(tw, "Association", orDash(st.AssociationID))
		for _, g := range st.GiveBack {
			row(tw, "To give back", g.PrivateIP+" on "+g.NetworkInterfaceID, "a former private IP of the Elastic IP, unassigned just after the move; nothing answers on it")
		}
	}
	_ = tw.Flush()
	node := f.ip.Status.Node
	switch {
	case node != "" && st.Node == node:
		fmt.Fprintf(w, "  EC2 routes %s to %s, the holder's node.\n", f.ip.Status.Address, node)
	case node != "" && f.ip.Status.AttachedNode == node:
		fmt.Fprintf(w, "  Moving: the agent on %s has claimed the address; the controller is moving it there in EC2 (see the Attached condition for any EC2 error).\n", node)
	case node != "":
		fmt.Fprintf(w, "  EC2 follows the claim: the address moves in EC2 once the agent on %s has claimed it.\n", node)
	case st.Node != "":
		fmt.Fprintf(w, "  EC2 still routes the address to %s; the controller takes it off once no agent answers for it.\n", st.Node)
	default:
		fmt.Fprintln(w, "  EC2 routes the address to no node.")
	}
}

// involvedNodes are the nodes explain reports on: the IP's nodes first,
// then the claiming pods' nodes by name, each once.
func involvedNodes(ip *ipv1.IP, pods []corev1.Pod) []string {
	var own, others []string
	for _, n := range []string{ip.Status.Node, ip.Status.AttachedNode} {
		if n != "" && !slices.Contains(own, n) {
			own = append(own, n)
		}
	}
	for i := range pods {
		if n := pods[i].Spec.NodeName; n != "" && !slices.Contains(own, n) && !slices.Contains(others, n) {
			others = append(others, n)
		}
	}
	slices.Sort(others)
	return append(own, others...)
}

func writeNodes(w io.Writer, f *facts) {
	nodes := involvedNodes(f.ip, f.pods)
	fmt.Fprintf(w, "\nNode agents (heartbeat Leases %s-<node> in namespace %s, judged by this machine's clock):\n", agentComponent, f.leaseNamespace)
	if len(nodes) == 0 {
		fmt.Fprintln(w, "  no node involved")
		return
	}
	sel, _ := f.nodeSelector()
	tw := table(w)
	row(tw, "NODE", "AGENT", "NODE STATUS")
	for _, name := range nodes {
		row(tw, name, f.agentOf(name).state, nodeStatus(f.nodes[name], sel))
	}
	_ = tw.Flush()
}

// nodeStatus summarises a node's Ready condition and whether the pool may
// use it.
func nodeStatus(n *corev1.Node, sel labels.Selector) string {
	if n == nil {
		return "node not found"
	}
	ready := "Ready condition unknown"
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				ready = "Ready"
			} else {
				ready = fmt.Sprintf("NOT Ready (%s)", orDash(c.Reason))
			}
		}
	}
	if n.Spec.Unschedulable {
		ready += ", cordoned"
	}
	if sel != nil && !sel.Matches(labels.Set(n.Labels)) {
		ready += ", excluded by the pool's nodeSelector"
	}
	return ready
}

func writePods(w io.Writer, f *facts) {
	fmt.Fprintf(w, "\nClaiming pods (annotation %s: %s):\n", ipv1.AnnotationIP, f.ip.Name)
	if len(f.pods) == 0 {
		fmt.Fprintln(w, "  none")
	} else {
		tw := table(w)
		row(tw, "POD", "PHASE", "READY", "NODE", "ROLE")
		for i := range f.pods {
			p := &f.pods[i]
			ready := "no"
			if podutils.IsPodReady(p) {
				ready = "yes"
			}
			row(tw, p.Namespace+"/"+p.Name, orDash(string(p.Status.Phase)), ready, orDash(p.Spec.NodeName), f.role(p))
		}
		_ = tw.Flush()
	}
	if holder := f.ip.Status.Pod; holder != "" && !slices.ContainsFunc(f.pods, func(p corev1.Pod) bool { return p.Namespace+"/"+p.Name == holder }) {
		fmt.Fprintf(w, "  The holder %s no longer exists or no longer claims this IP; the controller will choose again.\n", holder)
	}
}

func writeEvents(w io.Writer, f *facts) {
	fmt.Fprintln(w, "\nRecent events (oldest first):")
	if len(f.events) == 0 {
		fmt.Fprintln(w, "  none (events expire after an hour by default)")
		return
	}
	events := f.events[max(0, len(f.events)-shownEvents):]
	tw := table(w)
	row(tw, "AGE", "TYPE", "REASON", "MESSAGE")
	for i := range events {
		e := &events[i]
		age := since(f.now.Sub(eventTime(e)))
		if e.Series != nil && e.Series.Count > 1 {
			age += fmt.Sprintf(" (x%d)", e.Series.Count)
		}
		row(tw, age, e.Type, e.Reason, e.Note)
	}
	_ = tw.Flush()
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0) }

// row writes one indented tab-separated line.
func row(w io.Writer, cells ...string) {
	fmt.Fprintln(w, "  "+strings.Join(cells, "\t"))
}

// since formats an elapsed time the way kubectl does ("5s", "3m12s", "2d").
func since(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return duration.HumanDuration(d)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "no pod"
	}
	return s
}
