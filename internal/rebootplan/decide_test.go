package rebootplan

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

var now = time.Date(2026, 5, 5, 12, 0, 0, 0, time.UTC) // a Tuesday

// node builds a Ready, schedulable node; opts change it.
func node(name string, opts ...func(*Node)) Node {
	n := Node{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}, Ready: corev1.ConditionTrue, BootID: "boot-" + name}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func needing(n *Node)      { n.Annotations[rebootv1.AnnotationNeeded] = "true" }
func notReady(n *Node)     { n.Ready = corev1.ConditionFalse }
func unknown(n *Node)      { n.Ready = corev1.ConditionUnknown }
func cordoned(n *Node)     { n.Unschedulable = true }
func rebooting(n *Node)    { n.Annotations[rebootv1.AnnotationInProgress] = now.Format(time.RFC3339) }
func controlPlane(n *Node) { n.Labels[rebootv1.LabelControlPlane] = "" }
func cpTaint(n *Node)      { n.ControlPlaneTaint = true }
func failed(n *Node)       { n.Annotations[rebootv1.AnnotationFailed] = "boot ID did not change" }
func label(k, v string) func(*Node) {
	return func(n *Node) { n.Labels[k] = v }
}
func since(d time.Duration) func(*Node) {
	return func(n *Node) { n.Annotations[rebootv1.AnnotationNeededSince] = now.Add(-d).Format(time.RFC3339) }
}
func ordered(ago time.Duration) func(*Node) {
	return func(n *Node) {
		rebooting(n)
		n.Annotations[rebootv1.AnnotationNow] = now.Add(-ago).Format(time.RFC3339)
	}
}

func rg(name string, opts ...func(*rebootv1.RebootGroup)) rebootv1.RebootGroup {
	g := rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, o := range opts {
		o(&g)
	}
	return g
}

func selecting(k, v string) func(*rebootv1.RebootGroup) {
	return func(g *rebootv1.RebootGroup) {
		g.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
}

// cpSelecting sets a controlPlaneSelector of nodes labelled key=true.
func cpSelecting(key string) func(*rebootv1.RebootGroup) {
	return func(g *rebootv1.RebootGroup) {
		g.Spec.ControlPlaneSelector = &metav1.LabelSelector{MatchLabels: map[string]string{key: "true"}}
	}
}
func maxUnavailable(v intstr.IntOrString) func(*rebootv1.RebootGroup) {
	return func(g *rebootv1.RebootGroup) { g.Spec.MaxUnavailable = &v }
}
func blockingPods(k, v string) func(*rebootv1.RebootGroup) {
	return func(g *rebootv1.RebootGroup) {
		g.Spec.Drain.BlockingPodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
}
func withPod(ns, name, k, v string) func(*Node) {
	return func(n *Node) {
		n.Pods = append(n.Pods, Pod{Namespace: ns, Name: name, Labels: map[string]string{k: v}})
	}
}
func paused(g *rebootv1.RebootGroup) { g.Spec.Paused = true }
func windows(ws ...rebootv1.MaintenanceWindow) func(*rebootv1.RebootGroup) {
	return func(g *rebootv1.RebootGroup) { g.Spec.Windows = ws }
}

func TestBudget(t *testing.T) {
	tests := map[string]struct {
		v    *intstr.IntOrString
		size int
		want int
		err  string
	}{
		"unset":                 {nil, 10, 1, ""},
		"number":                {ptr.To(intstr.FromInt32(3)), 10, 3, ""},
		"number above size":     {ptr.To(intstr.FromInt32(30)), 10, 30, ""},
		"percent rounds down":   {ptr.To(intstr.FromString("25%")), 10, 2, ""},
		"percent at least one":  {ptr.To(intstr.FromString("10%")), 5, 1, ""},
		"percent of empty":      {ptr.To(intstr.FromString("50%")), 0, 1, ""},
		"100 percent":           {ptr.To(intstr.FromString("100%")), 7, 7, ""},
		"leading zero":          {ptr.To(intstr.FromString("050%")), 10, 5, ""},
		"zero":                  {ptr.To(intstr.FromInt32(0)), 10, 0, "at least 1"},
		"negative":              {ptr.To(intstr.FromInt32(-1)), 10, 0, "at least 1"},
		"zero percent":          {ptr.To(intstr.FromString("0%")), 10, 0, "from 1% to 100%"},
		"over 100 percent":      {ptr.To(intstr.FromString("101%")), 10, 0, "from 1% to 100%"},
		"negative percent":      {ptr.To(intstr.FromString("-5%")), 10, 0, "from 1% to 100%"},
		"no percent sign":       {ptr.To(intstr.FromString("5")), 10, 0, "from 1% to 100%"},
		"huge percent overflow": {ptr.To(intstr.FromString("99999999999999999999%")), 10, 0, "from 1% to 100%"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Budget(tc.v, tc.size)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("Budget() error = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Budget() = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	type want struct {
		approved    []string
		unavailable int               // in group "default" unless group is set
		waits       map[string]string // node -> message prefix
	}
	tests := map[string]struct {
		groups []rebootv1.RebootGroup
		nodes  []Node
		group  string
		want   want
	}{
		"implicit default group reboots one at a time": {
			nodes: []Node{node("a", needing), node("b", needing), node("c")},
			want:  want{approved: []string{"a"}, unavailable: 0, waits: map[string]string{"b": "Max unavailable reached (1 of 1 unavailable)"}},
		},
		"longest waiting first, then by name": {
			nodes: []Node{node("a", needing, since(time.Minute)), node("b", needing, since(time.Hour)), node("c", needing, since(time.Hour))},
			want:  want{approved: []string{"b"}, waits: map[string]string{"c": "Max unavailable reached", "a": "Max unavailable reached"}},
		},
		"a pod matching blockingPodSelector holds its node back, the next node goes": {
			groups: []rebootv1.RebootGroup{rg("default", blockingPods("app", "batch"))},
			nodes: []Node{
				node("a", needing, since(time.Hour), withPod("jobs", "etl-1", "app", "batch")),
				node("b", needing, withPod("web", "web-1", "app", "web")),
			},
			want: want{approved: []string{"b"}, unavailable: 0, waits: map[string]string{
				"a": "Pod jobs/etl-1 runs on the node and matches drain.blockingPodSelector"}},
		},
		"node NotReady for another reason uses the budget": {
			nodes: []Node{node("a", needing), node("x", notReady)},
			want:  want{unavailable: 1, waits: map[string]string{"a": "Max unavailable reached (1 of 1 unavailable)"}},
		},
		"node Unknown uses the budget": {
			nodes: []Node{node("a", needing), node("x", unknown)},
			want:  want{unavailable: 1, waits: map[string]string{"a": "Max unavailable reached"}},
		},
		"node cordoned by someone else uses the budget": {
			nodes: []Node{node("a", needing), node("x", cordoned)},
			want:  want{unavailable: 1, waits: map[string]string{"a": "Max unavailable reached"}},
		},
		"cordoned and NotReady counts once": {
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(2)))},
			nodes:  []Node{node("a", needing), node("x", cordoned, notReady), node("y")},
			want:   want{approved: []string{"a"}, unavailable: 1},
		},
		"rebooting and NotReady counts once": {
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(2)))},
			nodes:  []Node{node("a", needing), node("x", rebooting, notReady, cordoned)},
			want:   want{approved: []string{"a"}, unavailable: 1},
		},
		"rebooting node that is Ready again still holds its slot": {
			nodes: []Node{node("a", needing), node("x", rebooting)},
			want:  want{unavailable: 1, waits: map[string]string{"a": "Max unavailable reached"}},
		},
		"deleted node is simply absent and frees its slot": {
			nodes: []Node{node("a", needing), node("b")},
			want:  want{approved: []string{"a"}},
		},
		"needing node cordoned by an admin costs nothing more": {
			nodes: []Node{node("a", needing, cordoned), node("b")},
			want:  want{approved: []string{"a"}, unavailable: 1},
		},
		"over budget approves nothing, not even a cordoned node": {
			nodes: []Node{node("a", needing, cordoned), node("x", notReady)},
			want:  want{unavailable: 2, waits: map[string]string{"a": "Max unavailable reached (2 of 1 unavailable)"}},
		},
		"needing node that is not Ready waits": {
			nodes:  []Node{node("a", needing, notReady), node("b", needing)},
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(3)))},
			want:   want{approved: []string{"b"}, unavailable: 1, waits: map[string]string{"a": "Node is not Ready"}},
		},
		"percentage rounds down": {
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromString("30%")))},
			nodes:  []Node{node("a", needing), node("b", needing), node("c", needing), node("d"), node("e"), node("f"), node("g")},
			want:   want{approved: []string{"a", "b"}, waits: map[string]string{"c": "Max unavailable reached (2 of 2 unavailable)"}},
		},
		"percentage at least one": {
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromString("1%")))},
			nodes:  []Node{node("a", needing), node("b", needing)},
			want:   want{approved: []string{"a"}, waits: map[string]string{"b": "Max unavailable reached"}},
		},
		"paused": {
			groups: []rebootv1.RebootGroup{rg("default", paused)},
			nodes:  []Node{node("a", needing)},
			want:   want{waits: map[string]string{"a": "Paused"}},
		},
		"halted after failures": {
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(5)), func(g *rebootv1.RebootGroup) { g.Spec.MaxFailures = ptr.To[int32](2) })},
			nodes:  []Node{node("a", needing), node("f1", failed), node("f2", ordered(time.Hour))},
			want:   want{unavailable: 1, waits: map[string]string{"a": "Halted after 2 failures"}},
		},
		"stuck below maxFailures is not halted but keeps its slot": {
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(2)), func(g *rebootv1.RebootGroup) { g.Spec.MaxFailures = ptr.To[int32](2) })},
			nodes:  []Node{node("a", needing), node("b", needing), node("s", ordered(time.Hour))},
			want:   want{approved: []string{"a"}, unavailable: 1, waits: map[string]string{"b": "Max unavailable reached"}},
		},
		"maxFailures 0 never halts; failed node itself is not retried": {
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(2)), func(g *rebootv1.RebootGroup) { g.Spec.MaxFailures = ptr.To[int32](0) })},
			nodes:  []Node{node("a", needing), node("f", needing, failed)},
			want:   want{approved: []string{"a"}, waits: map[string]string{"f": "Last reboot failed (boot ID did not change)"}},
		},
		"outside the window": {
			groups: []rebootv1.RebootGroup{rg("default", windows(rebootv1.MaintenanceWindow{Start: "02:00", End: "04:00", TimeZone: "Europe/Oslo"}))},
			nodes:  []Node{node("a", needing)},
			want:   want{waits: map[string]string{"a": "Outside maintenance window (next opens at 2026-05-06T00:00:00Z)"}},
		},
		"inside the window": {
			groups: []rebootv1.RebootGroup{rg("default", windows(rebootv1.MaintenanceWindow{Start: "13:00", End: "15:00", TimeZone: "Europe/Oslo"}))},
			nodes:  []Node{node("a", needing)},
			want:   want{approved: []string{"a"}},
		},
		"unknown time zone": {
			groups: []rebootv1.RebootGroup{rg("default", windows(rebootv1.MaintenanceWindow{Start: "13:00", End: "15:00", TimeZone: "Europe/Osloo"}))},
			nodes:  []Node{node("a", needing)},
			want:   want{waits: map[string]string{"a": `Group default cannot be used: spec.windows[0]: unknown time zone "Europe/Osloo"`}},
		},
		"retry after a drain timeout": {
			nodes: []Node{node("a", needing, func(n *Node) {
				n.Annotations[rebootv1.AnnotationRetryAfter] = now.Add(time.Minute).Format(time.RFC3339)
			}), node("b", needing, since(time.Second))},
			want: want{approved: []string{"b"}, waits: map[string]string{"a": "Drain timed out; retrying after 2026-05-05T12:01:00Z"}},
		},
		"only needed=true is a request": {
			nodes: []Node{
				node("a", func(n *Node) { n.Annotations[rebootv1.AnnotationNeeded] = "false" }),
				node("b", func(n *Node) { n.Annotations[rebootv1.AnnotationNeeded] = "no" }),
				node("c", func(n *Node) { n.Annotations[rebootv1.AnnotationNeeded] = "" }),
				node("d", func(n *Node) { n.Annotations[rebootv1.AnnotationNeeded] = "False" }),
			},
			want: want{},
		},
		"needed=TRUE is a request": {
			nodes: []Node{node("a", func(n *Node) { n.Annotations[rebootv1.AnnotationNeeded] = "TRUE" })},
			want:  want{approved: []string{"a"}},
		},
		"groups keep separate budgets": {
			groups: []rebootv1.RebootGroup{rg("blue", selecting("pool", "blue")), rg("green", selecting("pool", "green"))},
			nodes: []Node{
				node("b1", label("pool", "blue"), needing), node("b2", label("pool", "blue"), needing),
				node("g1", label("pool", "green"), needing), node("g2", label("pool", "green"), notReady),
				node("d1", needing),
			},
			group: "blue",
			want:  want{approved: []string{"b1", "d1"}, waits: map[string]string{"b2": "Max unavailable reached", "g1": "Max unavailable reached"}},
		},
		"overlapping groups handle the node in neither but count it": {
			groups: []rebootv1.RebootGroup{rg("a", selecting("pool", "x")), rg("b", selecting("zone", "z"))},
			nodes:  []Node{node("n1", label("pool", "x"), label("zone", "z"), needing), node("n2", label("pool", "x"), needing)},
			group:  "a",
			want:   want{approved: []string{"n2"}, waits: map[string]string{"n1": "Overlapping groups: a, b"}},
		},
		"invalid selector blocks the default group": {
			groups: []rebootv1.RebootGroup{rg("bad", func(g *rebootv1.RebootGroup) {
				g.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"bad key!": "x"}}
			})},
			nodes: []Node{node("a", needing)},
			want:  want{waits: map[string]string{"a": "Group default cannot be used: the nodeSelector of group bad is invalid"}},
		},
		"control plane waits for workers": {
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(5)))},
			nodes:  []Node{node("cp1", controlPlane, needing, since(time.Hour)), node("w1", needing)},
			want:   want{approved: []string{"w1"}, waits: map[string]string{"cp1": "Control-plane node waits for workers"}},
		},
		"control plane waits for a rebooting worker": {
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(5)))},
			nodes:  []Node{node("cp1", controlPlane, needing), node("w1", rebooting)},
			want:   want{unavailable: 1, waits: map[string]string{"cp1": "Control-plane node waits for workers"}},
		},
		"control planes one at a time": {
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(5)))},
			nodes:  []Node{node("cp1", controlPlane, needing), node("cp2", controlPlane, needing), node("cp3", controlPlane)},
			want:   want{approved: []string{"cp1"}, waits: map[string]string{"cp2": "Control-plane nodes reboot one at a time"}},
		},
		"control plane waits while another is down for any reason": {
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(5)))},
			nodes:  []Node{node("cp1", controlPlane, needing), node("cp2", controlPlane, notReady)},
			want:   want{unavailable: 1, waits: map[string]string{"cp1": "Control-plane nodes reboot one at a time"}},
		},
		"workers wait while a control plane reboots": {
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(5)))},
			nodes:  []Node{node("cp1", controlPlane, rebooting), node("w1", needing)},
			want:   want{unavailable: 1, waits: map[string]string{"w1": "Waits for control-plane nodes"}},
		},
		"control plane one at a time across groups": {
			groups: []rebootv1.RebootGroup{rg("cpa", selecting("cp", "a"), maxUnavailable(intstr.FromInt32(3))), rg("cpb", selecting("cp", "b"), maxUnavailable(intstr.FromInt32(3)))},
			nodes:  []Node{node("cp1", label("cp", "a"), controlPlane, needing), node("cp2", label("cp", "b"), controlPlane, needing)},
			group:  "cpa",
			want:   want{approved: []string{"cp1"}, waits: map[string]string{"cp2": "Control-plane nodes reboot one at a time"}},
		},
		"a node whose agent is not alive waits": {
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(5)))},
			nodes:  []Node{node("a", needing, func(n *Node) { n.AgentDown, n.AgentDownWhy = true, "no heartbeat" }), node("b", needing)},
			want:   want{approved: []string{"b"}, waits: map[string]string{"a": "The node's reboot-agent is not alive (no heartbeat)"}},
		},
		"control plane by taint only": {
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(5)))},
			nodes:  []Node{node("cp1", cpTaint, needing), node("cp2", cpTaint, needing), node("w1", needing)},
			want: want{approved: []string{"w1"}, waits: map[string]string{
				"cp1": "Control-plane node waits for workers", "cp2": "Control-plane node waits for workers"}},
		},
		"control plane by a group's selector": {
			groups: []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(5)), cpSelecting("etcd"))},
			nodes:  []Node{node("e1", label("etcd", "true"), needing), node("e2", label("etcd", "true"), needing), node("e3", label("etcd", "true"))},
			want:   want{approved: []string{"e1"}, waits: map[string]string{"e2": "Control-plane nodes reboot one at a time"}},
		},
		"a group's control-plane selector reaches across groups": {
			groups: []rebootv1.RebootGroup{
				rg("etcd", selecting("etcd", "true"), maxUnavailable(intstr.FromInt32(3)), cpSelecting("etcd")),
				rg("workers", selecting("role", "w"), maxUnavailable(intstr.FromInt32(3))),
			},
			nodes: []Node{node("e1", label("etcd", "true"), rebooting), node("w1", label("role", "w"), needing)},
			group: "workers",
			want:  want{unavailable: 0, waits: map[string]string{"w1": "Waits for control-plane nodes"}},
		},
		"a control-plane selector marks only its own group's nodes": {
			groups: []rebootv1.RebootGroup{
				rg("a", selecting("pool", "a"), maxUnavailable(intstr.FromInt32(3)), cpSelecting("big")),
				rg("b", selecting("pool", "b"), maxUnavailable(intstr.FromInt32(3))),
			},
			nodes: []Node{node("b1", label("pool", "b"), label("big", "true"), needing), node("b2", label("pool", "b"), label("big", "true"), needing)},
			group: "b",
			want:  want{approved: []string{"b1", "b2"}},
		},
		"control plane goes when workers are blocked by their window": {
			groups: []rebootv1.RebootGroup{
				rg("workers", selecting("role", "w"), windows(rebootv1.MaintenanceWindow{Start: "02:00", End: "03:00"})),
				rg("cp", selecting("role", "cp")),
			},
			nodes: []Node{node("cp1", label("role", "cp"), controlPlane, needing), node("w1", label("role", "w"), needing)},
			group: "workers",
			want:  want{approved: []string{"cp1"}, waits: map[string]string{"w1": "Outside maintenance window"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := Decide(Snapshot{Groups: tc.groups, Nodes: tc.nodes, Now: now})
			if !slices.Equal(d.Approved, tc.want.approved) {
				t.Errorf("Approved = %v, want %v", d.Approved, tc.want.approved)
			}
			gname := cmpOr(tc.group, rebootv1.DefaultGroupName)
			g := d.Group(gname)
			if g == nil {
				t.Fatalf("no decision for group %s", gname)
			}
			if len(g.Unavailable) != tc.want.unavailable {
				t.Errorf("group %s: Unavailable = %v, want %d nodes", gname, g.Unavailable, tc.want.unavailable)
			}
			got := map[string]string{}
			for _, w := range d.Waiting() {
				got[w.Node] = w.Message
			}
			for n, msg := range tc.want.waits {
				if !strings.HasPrefix(got[n], msg) {
					t.Errorf("node %s waits with %q, want %q", n, got[n], msg)
				}
			}
			for n, msg := range got {
				if _, ok := tc.want.waits[n]; !ok {
					t.Errorf("node %s waits unexpectedly: %q", n, msg)
				}
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestDecideGroupReport(t *testing.T) {
	groups := []rebootv1.RebootGroup{rg("a", selecting("pool", "x")), rg("b", selecting("zone", "z"))}
	nodes := []Node{
		node("n1", label("pool", "x"), label("zone", "z")),
		node("n2", label("pool", "x"), ordered(time.Hour)),
		node("n3", label("pool", "x"), func(n *Node) { n.Annotations[rebootv1.AnnotationRebootedAt] = now.Format(time.RFC3339) }),
		node("n4"),
	}
	d := Decide(Snapshot{Groups: groups, Nodes: nodes, Now: now})
	a := d.Group("a")
	if !slices.Equal(a.Nodes, []string{"n1", "n2", "n3"}) || !slices.Equal(a.Stuck, []string{"n2"}) || !slices.Equal(a.Failed, []string{"n2"}) ||
		!slices.Equal(a.Rebooting, []string{"n2"}) || a.Done != 1 || !a.Halted {
		t.Errorf("group a = %+v", a)
	}
	if len(d.Overlapping) != 1 || d.Overlapping[0].Node != "n1" || !slices.Equal(d.Overlapping[0].Groups, []string{"a", "b"}) {
		t.Errorf("Overlapping = %+v", d.Overlapping)
	}
	def := d.Group(rebootv1.DefaultGroupName)
	if !def.Implicit || !slices.Equal(def.Nodes, []string{"n4"}) || def.MaxUnavailable != 1 {
		t.Errorf("default group = %+v", def)
	}
	if bad := Decide(Snapshot{Groups: []rebootv1.RebootGroup{rg("x", maxUnavailable(intstr.FromString("0%")))}, Now: now}).Group("x"); bad.Err == nil {
		t.Error("a group with maxUnavailable 0% has no Err")
	}
}

func TestNodeFrom(t *testing.T) {
	n := NodeFrom(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{rebootv1.LabelMaster: ""}},
		Spec:       corev1.NodeSpec{Unschedulable: true},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue}, {Type: corev1.NodeReady, Status: corev1.ConditionFalse}},
			NodeInfo:   corev1.NodeSystemInfo{BootID: "b1"},
		},
	})
	if n.Name != "n" || n.Ready != corev1.ConditionFalse || !n.Unschedulable || n.BootID != "b1" || !n.ControlPlane() {
		t.Errorf("NodeFrom() = %+v", n)
	}
	if NodeFrom(&corev1.Node{}).Ready != corev1.ConditionUnknown {
		t.Error("a node without a Ready condition must be Unknown")
	}
	for _, key := range []string{rebootv1.LabelControlPlane, rebootv1.LabelMaster} {
		tainted := NodeFrom(&corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: "other", Effect: corev1.TaintEffectNoExecute}, {Key: key, Effect: corev1.TaintEffectNoSchedule}}}})
		if !tainted.ControlPlane() {
			t.Errorf("a node tainted %s is not a control-plane node", key)
		}
	}
	if NodeFrom(&corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "control-plane"}}}}).ControlPlane() {
		t.Error("an unrelated taint made a control-plane node")
	}
}

// Decide marks the nodes a group's controlPlaneSelector selects on its own
// copy: the caller's snapshot is left as it was, and the decision lists
// every control-plane node.
func TestDecideControlPlaneList(t *testing.T) {
	nodes := []Node{node("a", label("etcd", "true")), node("b", controlPlane), node("c", cpTaint), node("d")}
	d := Decide(Snapshot{Groups: []rebootv1.RebootGroup{rg("default", cpSelecting("etcd"))}, Nodes: nodes, Now: now})
	if !slices.Equal(d.ControlPlane, []string{"a", "b", "c"}) {
		t.Errorf("ControlPlane = %v, want [a b c]", d.ControlPlane)
	}
	if !d.IsControlPlane("a") || d.IsControlPlane("d") {
		t.Errorf("IsControlPlane(a) = %v, IsControlPlane(d) = %v", d.IsControlPlane("a"), d.IsControlPlane("d"))
	}
	if nodes[0].ControlPlane() {
		t.Error("Decide changed the caller's node")
	}
}
