package rebootcmd

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootplan"
)

// now is the fixed clock of the unit tests: a Sunday.
var now = time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)

func stampAgo(d time.Duration) string { return now.Add(-d).Format(time.RFC3339) }

// node is a Ready, schedulable node in boot "boot-<name>" with the labels
// and annotations given as alternating keys and values.
func node(name string, labels map[string]string, annotations ...string) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{}},
		Status: corev1.NodeStatus{
			NodeInfo:   corev1.NodeSystemInfo{BootID: "boot-" + name},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}},
		},
	}
	for i := 0; i+1 < len(annotations); i += 2 {
		n.Annotations[annotations[i]] = annotations[i+1]
	}
	return n
}

func clusterOf(groups []rebootv1.RebootGroup, nodes ...*corev1.Node) *cluster {
	cl := &cluster{snapshot: rebootplan.Snapshot{Groups: groups, Now: now}, nodes: map[string]*corev1.Node{}}
	for _, n := range nodes {
		cl.nodes[n.Name] = n
		cl.snapshot.Nodes = append(cl.snapshot.Nodes, rebootplan.NodeFrom(n))
	}
	return cl
}

func group(name string, selector map[string]string, maxUnavailable intstr.IntOrString) rebootv1.RebootGroup {
	g := rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: rebootv1.RebootGroupSpec{MaxUnavailable: &maxUnavailable}}
	if selector != nil {
		g.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: selector}
	}
	return g
}

func statusOf(t *testing.T, cl *cluster, name string) NodeStatus {
	t.Helper()
	d := rebootplan.Decide(cl.snapshot)
	return nodeStatus(nodeByName(cl.snapshot, name), cl.nodes[name], groupOf(d)[name], d)
}

func TestNodeStatus(t *testing.T) {
	worker := map[string]string{"pool": "w"}
	needed := []string{rebootv1.AnnotationNeeded, "true", rebootv1.AnnotationNeededSince, stampAgo(10 * time.Minute)}
	approved := slices.Concat(needed, []string{rebootv1.AnnotationInProgress, stampAgo(5 * time.Minute), rebootv1.AnnotationBootID, "boot-n1"})
	ordered := slices.Concat(approved, []string{rebootv1.AnnotationNow, stampAgo(2 * time.Minute)})
	cordoned := func(n *corev1.Node) *corev1.Node { n.Spec.Unschedulable = true; return n }
	down := func(n *corev1.Node) *corev1.Node {
		n.Status.Conditions[0].Status = corev1.ConditionUnknown
		return n
	}
	backIn := func(n *corev1.Node) *corev1.Node {
		n.Status.NodeInfo.BootID = "boot-new"
		n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now.Add(-30 * time.Second))
		return n
	}
	for _, tc := range []struct {
		name   string
		node   *corev1.Node
		others []*corev1.Node
		state  State
		since  time.Duration
		detail string
	}{
		{name: "nothing", node: node("n1", worker), state: StateNone},
		{name: "needed, next", node: node("n1", worker, needed...), state: StateNeeded, since: 10 * time.Minute,
			detail: "Approved at the controller's next decision"},
		{name: "needed, budget used by a node down for another reason", node: node("n1", worker, needed...),
			others: []*corev1.Node{down(node("n2", worker))}, state: StateNeeded,
			detail: "Waits (MaxUnavailable): Max unavailable reached (1 of 1 unavailable)"},
		{name: "approved", node: node("n1", worker, approved...), state: StateApproved, since: 5 * time.Minute},
		{name: "draining", node: cordoned(node("n1", worker, approved...)), state: StateDraining, since: 5 * time.Minute,
			detail: "Cordoned; pods are being evicted"},
		{name: "ordered, still up", node: cordoned(node("n1", worker, ordered...)), state: StateRebooting, since: 2 * time.Minute,
			detail: "still up in boot boot-n1"},
		{name: "down", node: down(cordoned(node("n1", worker, ordered...))), state: StateRebooting, detail: "The node is down"},
		{name: "back, soaking", node: backIn(cordoned(node("n1", worker, ordered...))), state: StateSoaking, since: 30 * time.Second,
			detail: "Back in boot boot-new (was boot-n1) and Ready"},
		{name: "stuck", node: down(cordoned(node("n1", worker, slices.Concat(approved, []string{rebootv1.AnnotationNow, stampAgo(time.Hour)})...))),
			state: StateStuck, since: time.Hour, detail: "not back with a new boot ID and Ready since; it keeps its slot"},
		{name: "failed", node: node("n1", worker, rebootv1.AnnotationNeeded, "true", rebootv1.AnnotationFailed, "boot ID did not change"),
			state: StateFailed, detail: "boot ID did not change; remove the annotation reboot.kubext.io/failed to retry"},
		{name: "done", node: node("n1", worker, rebootv1.AnnotationRebootedAt, stampAgo(3*time.Hour)), state: StateDone, since: 3 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := clusterOf([]rebootv1.RebootGroup{group("workers", worker, intstr.FromInt32(1))}, append(tc.others, tc.node)...)
			s := statusOf(t, cl, "n1")
			if s.State != tc.state || s.Group != "workers" {
				t.Fatalf("state %q in group %q, want %q in workers (%s)", s.State, s.Group, tc.state, s.Detail)
			}
			if tc.since != 0 && !s.Since.Equal(now.Add(-tc.since)) {
				t.Errorf("since %s, want %s ago", s.Since, tc.since)
			}
			if !strings.Contains(s.Detail, tc.detail) {
				t.Errorf("detail %q, want it to contain %q", s.Detail, tc.detail)
			}
		})
	}
}

func TestStatusTables(t *testing.T) {
	worker := map[string]string{"pool": "w"}
	g := group("workers", worker, intstr.FromString("25%"))
	cl := clusterOf([]rebootv1.RebootGroup{g},
		node("w1", worker, rebootv1.AnnotationNeeded, "true", rebootv1.AnnotationInProgress, stampAgo(time.Minute), rebootv1.AnnotationBootID, "boot-w1"),
		node("w2", worker, rebootv1.AnnotationNeeded, "true"),
		node("w3", worker),
		node("w4", worker, rebootv1.AnnotationRebootedAt, stampAgo(time.Hour)),
		node("d1", nil, rebootv1.AnnotationNeeded, "true"),
		node("d2", nil),
	)
	var out bytes.Buffer
	if err := writeStatus(&out, cl, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	want := [][]string{
		{"GROUP", "NODES", "MAX", "UNAVAILABLE", "UNAVAILABLE", "NEEDING", "REBOOTING", "DONE", "FAILED", "STUCK", "STATE", "CURRENT"},
		{"default", "(implicit)", "2", "1", "0", "1", "0", "0", "0", "0", "Waiting", "-"},
		{"workers", "4", "1", "1", "1", "1", "1", "0", "0", "RollingOut", "w1"},
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d:\n got %q\nwant %q\n%s", i, got, w, out.String())
		}
	}
	for _, s := range []string{
		"d1     default   Needed     -       Approved at the controller's next decision",
		"w1     workers   Approved   60s",
		"w2     workers   Needed     -       Waits (MaxUnavailable): Max unavailable reached (1 of 1 unavailable)",
		"w4     workers   Done       60m     Rebooted at 2026-03-01T02:00:00Z",
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("missing %q in\n%s", s, out.String())
		}
	}
	if strings.Contains(out.String(), "w3") || strings.Contains(out.String(), "d2") {
		t.Errorf("untouched nodes listed without --all:\n%s", out.String())
	}
	out.Reset()
	if err := writeStatus(&out, cl, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "w3     workers   -") {
		t.Errorf("--all must list w3:\n%s", out.String())
	}
}

func TestPlan(t *testing.T) {
	worker, cp := map[string]string{"pool": "w"}, map[string]string{rebootv1.LabelControlPlane: ""}
	need := []string{rebootv1.AnnotationNeeded, "true"}
	night := group("night", map[string]string{"pool": "night"}, intstr.FromInt32(5))
	night.Spec.Windows = []rebootv1.MaintenanceWindow{{Start: "22:00", End: "23:00", TimeZone: "UTC"}}
	paused := group("paused", map[string]string{"pool": "paused"}, intstr.FromInt32(1))
	paused.Spec.Paused = true
	cl := clusterOf([]rebootv1.RebootGroup{group("workers", worker, intstr.FromInt32(2)), night, paused},
		node("w1", worker, need...), node("w2", worker, need...), node("w3", worker, need...), node("w4", worker),
		node("cp1", cp, need...),
		node("n1", map[string]string{"pool": "night"}, need...),
		node("p1", map[string]string{"pool": "paused"}, need...),
	)
	var out bytes.Buffer
	if err := writePlan(&out, cl.snapshot); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"Plan at 2026-03-01T03:00:00Z (dry run; assumes every reboot succeeds):",
		"Group default: (implicit) 1 nodes, maxUnavailable 1, unavailable now 0\n" +
			"  batch 3  after batch 2                      cp1\n",
		"Group night: 1 nodes, maxUnavailable 5, unavailable now 0; OutsideWindow: next opens 2026-03-01T22:00:00Z\n" +
			"  batch 4  window opens 2026-03-01T22:00:00Z  n1\n",
		"Group paused: 1 nodes, maxUnavailable 1, unavailable now 0; Paused\n" +
			"  blocked  p1                                 Paused\n",
		"Group workers: 4 nodes, maxUnavailable 2, unavailable now 0\n" +
			"  batch 1  now                                w1 w2\n" +
			"  batch 2  after batch 1                      w3\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}

	out.Reset()
	if err := writePlan(&out, clusterOf(nil, node("w1", worker)).snapshot); err != nil {
		t.Fatal(err)
	}
	if out.String() != "No node needs a reboot.\n" {
		t.Errorf("plan with nothing to do: %q", out.String())
	}
}

// The plan and status commands show a node whose reboot-agent's heartbeat
// lapsed (or never was) as waiting for its agent, as the controller holds
// it back; with no heartbeats at all they assume agents are not checked.
func TestAgentsDownFromHeartbeats(t *testing.T) {
	lease := func(node string, renewed time.Duration) coordinationv1.Lease {
		return coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "reboot-agent-" + node},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: &metav1.MicroTime{Time: now.Add(-renewed)}},
		}
	}
	needing := func(name string) *corev1.Node { return node(name, nil, rebootv1.AnnotationNeeded, "true") }
	cl := clusterOf([]rebootv1.RebootGroup{group("default", nil, intstr.FromInt32(5))}, needing("alive"), needing("lapsed"), needing("none"))
	markAgentsDown(cl.snapshot.Nodes, []coordinationv1.Lease{lease("alive", 5*time.Second), lease("lapsed", 2*time.Minute)}, now)
	d := rebootplan.Decide(cl.snapshot)
	if !slices.Equal(d.Approved, []string{"alive"}) {
		t.Errorf("approved %v, want [alive]", d.Approved)
	}
	waits := map[string]string{}
	for _, w := range d.Waiting() {
		waits[w.Node] = string(w.Reason) + ": " + w.Message
	}
	if !strings.Contains(waits["lapsed"], "AgentNotAlive: The node's reboot-agent is not alive (its heartbeat lapsed 80s ago)") {
		t.Errorf("lapsed: %q", waits["lapsed"])
	}
	if !strings.Contains(waits["none"], "no heartbeat Lease reboot-agent-none") {
		t.Errorf("none: %q", waits["none"])
	}

	cl = clusterOf(nil, needing("a"))
	markAgentsDown(cl.snapshot.Nodes, nil, now)
	if cl.snapshot.Nodes[0].AgentDown {
		t.Error("no heartbeats anywhere, yet a node is marked as having no agent")
	}
}
