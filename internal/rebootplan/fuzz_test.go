package rebootplan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// randomSnapshot builds a cluster of up to 40 nodes in up to 4 groups (plus
// the default group) selected by two label keys, so that some nodes overlap.
func randomSnapshot(seed uint64) Snapshot {
	r := rand.New(rand.NewPCG(seed, seed>>32|1))
	s := Snapshot{Now: time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC).Add(time.Duration(r.IntN(7*24*60)) * time.Minute)}
	keys := []string{"pool", "zone"}
	for i := range r.IntN(5) {
		var opts []func(*rebootv1.RebootGroup)
		opts = append(opts, selecting(keys[i%2], fmt.Sprint(i)))
		if r.IntN(2) == 0 {
			opts = append(opts, maxUnavailable(intstr.FromInt32(int32(1+r.IntN(4)))))
		} else {
			opts = append(opts, maxUnavailable(intstr.FromString(fmt.Sprintf("%d%%", 1+r.IntN(100)))))
		}
		if r.IntN(6) == 0 {
			opts = append(opts, paused)
		}
		if r.IntN(4) == 0 {
			opts = append(opts, windows(rebootv1.MaintenanceWindow{Start: "01:00", End: "05:30", TimeZone: "Europe/Oslo"}))
		}
		if r.IntN(3) == 0 {
			mf := int32(r.IntN(3))
			opts = append(opts, func(g *rebootv1.RebootGroup) { g.Spec.MaxFailures = &mf })
		}
		s.Groups = append(s.Groups, rg(fmt.Sprintf("g%d", i), opts...))
	}
	if r.IntN(3) == 0 {
		s.Groups = append(s.Groups, rg(rebootv1.DefaultGroupName, maxUnavailable(intstr.FromString("50%"))))
	}
	for i := range r.IntN(41) {
		n := Node{Name: fmt.Sprintf("n%02d", i), Labels: map[string]string{}, Annotations: map[string]string{}, Ready: corev1.ConditionTrue}
		if r.IntN(2) == 0 {
			n.Labels["pool"] = fmt.Sprint([]int{0, 2}[r.IntN(2)])
		}
		if r.IntN(3) == 0 {
			n.Labels["zone"] = fmt.Sprint([]int{1, 3}[r.IntN(2)])
		}
		if r.IntN(5) == 0 {
			n.Labels[rebootv1.LabelControlPlane] = ""
		}
		n.Ready = []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionTrue, corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}[r.IntN(5)]
		n.Unschedulable = r.IntN(6) == 0
		if r.IntN(2) == 0 {
			n.Annotations[rebootv1.AnnotationNeeded] = "true"
			n.Annotations[rebootv1.AnnotationNeededSince] = s.Now.Add(-time.Duration(r.IntN(100)) * time.Minute).Format(time.RFC3339)
		}
		if r.IntN(8) == 0 {
			n.Annotations[rebootv1.AnnotationInProgress] = s.Now.Format(time.RFC3339)
			if r.IntN(2) == 0 {
				n.Annotations[rebootv1.AnnotationNow] = s.Now.Add(-time.Duration(r.IntN(3600)) * time.Second).Format(time.RFC3339)
			}
		}
		if r.IntN(12) == 0 {
			n.Annotations[rebootv1.AnnotationFailed] = "stuck"
		}
		s.Nodes = append(s.Nodes, n)
	}
	return s
}

// members computes group membership independently of the planner: a node
// belongs to every group whose single matchLabels entry it carries, or to the
// default group when it carries none.
func members(s Snapshot) map[string][]Node {
	out := map[string][]Node{}
	for _, n := range s.Nodes {
		var in []string
		for _, g := range s.Groups {
			if g.Spec.NodeSelector == nil {
				continue
			}
			for k, v := range g.Spec.NodeSelector.MatchLabels {
				if n.Labels[k] == v {
					in = append(in, g.Name)
				}
			}
		}
		if len(in) == 0 {
			in = []string{rebootv1.DefaultGroupName}
		}
		for _, g := range in {
			out[g] = append(out[g], n)
		}
	}
	return out
}

func countUnavailable(nodes []Node) int {
	c := 0
	for _, n := range nodes {
		_, a := n.Annotations[rebootv1.AnnotationInProgress]
		_, b := n.Annotations[rebootv1.AnnotationNow]
		if n.Ready != corev1.ConditionTrue || n.Unschedulable || a || b {
			c++
		}
	}
	return c
}

// approve returns s with the nodes approved as the controller would mark
// them.
func approve(s Snapshot, names []string) Snapshot {
	out := s
	out.Nodes = make([]Node, len(s.Nodes))
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	for i, n := range s.Nodes {
		if set[n.Name] {
			ann := map[string]string{}
			for k, v := range n.Annotations {
				ann[k] = v
			}
			ann[rebootv1.AnnotationInProgress] = s.Now.Format(time.RFC3339)
			n.Annotations = ann
		}
		out.Nodes[i] = n
	}
	return out
}

func checkInvariants(t *testing.T, s Snapshot) {
	d := Decide(s)
	after := approve(s, d.Approved)
	before, now := members(s), members(after)
	approvedIn := map[string]int{}
	for _, g := range d.Groups {
		approvedIn[g.Name] = len(g.Approved)
	}
	for _, g := range d.Groups {
		b, a := countUnavailable(before[g.Name]), countUnavailable(now[g.Name])
		if b != len(g.Unavailable) {
			t.Errorf("group %s: planner counts %d unavailable, independent count %d", g.Name, len(g.Unavailable), b)
		}
		if b > g.MaxUnavailable && approvedIn[g.Name] > 0 {
			t.Errorf("group %s was over budget (%d > %d) but approved %v", g.Name, b, g.MaxUnavailable, g.Approved)
		}
		if b <= g.MaxUnavailable && a > g.MaxUnavailable {
			t.Errorf("group %s: approvals %v take it from %d to %d unavailable, budget %d", g.Name, g.Approved, b, a, g.MaxUnavailable)
		}
		if len(g.Approved) > 0 && (g.Paused || g.Halted || !g.InWindow || g.Err != nil) {
			t.Errorf("group %s approved %v while paused=%t halted=%t inWindow=%t err=%v", g.Name, g.Approved, g.Paused, g.Halted, g.InWindow, g.Err)
		}
		// Each node that asks and holds no slot is approved or told why it
		// waits, once: the controller's status counts the needing nodes
		// as the Waiting ones.
		var asking, decided []string
		for _, n := range before[g.Name] {
			if n.Needs() && !n.HoldsSlot() {
				asking = append(asking, n.Name)
			}
		}
		decided = append(decided, g.Approved...)
		for _, w := range g.Waiting {
			decided = append(decided, w.Node)
		}
		slices.Sort(asking)
		slices.Sort(decided)
		if !slices.Equal(asking, decided) {
			t.Errorf("group %s: nodes asking %v, approved or waiting %v", g.Name, asking, decided)
		}
	}
	byName := map[string]Node{}
	for _, n := range s.Nodes {
		byName[n.Name] = n
	}
	var cpApproved, workerApproved int
	cpSlot, workerSlot := false, false
	for _, n := range s.Nodes {
		if n.HoldsSlot() {
			cpSlot = cpSlot || n.ControlPlane()
			workerSlot = workerSlot || !n.ControlPlane()
		}
	}
	for _, name := range d.Approved {
		n := byName[name]
		if !n.Needs() || n.HoldsSlot() || n.Failed() || n.Ready != corev1.ConditionTrue {
			t.Errorf("approved %s: needs=%t holdsSlot=%t failed=%t ready=%s", name, n.Needs(), n.HoldsSlot(), n.Failed(), n.Ready)
		}
		if n.ControlPlane() {
			cpApproved++
		} else {
			workerApproved++
		}
	}
	if cpApproved > 1 || cpApproved > 0 && (workerApproved > 0 || workerSlot) || workerApproved > 0 && cpSlot {
		t.Errorf("control-plane rule broken: %d control-plane and %d workers approved; control plane rebooting %t, worker rebooting %t", cpApproved, workerApproved, cpSlot, workerSlot)
	}
	if cpApproved == 1 {
		for _, n := range s.Nodes {
			if n.ControlPlane() && n.Unavailable() && !slices.Contains(d.Approved, n.Name) {
				t.Errorf("control-plane node approved while %s is unavailable", n.Name)
			}
		}
	}
}

// FuzzDecide checks the budget and control-plane invariants of Decide on
// random snapshots: run with `go test -fuzz FuzzDecide ./internal/rebootplan/`.
func FuzzDecide(f *testing.F) {
	for _, seed := range []uint64{0, 1, 42, 1 << 40, 0xdeadbeef} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { checkInvariants(t, randomSnapshot(seed)) })
}

// FuzzPlan checks that a dry run approves every node at most once, respects
// the budgets batch by batch, and accounts for every needing node.
func FuzzPlan(f *testing.F) {
	for _, seed := range []uint64{0, 7, 99, 1 << 33} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { checkPlan(t, randomSnapshot(seed)) })
}

func TestPlanRandomSnapshots(t *testing.T) {
	for seed := range uint64(1000) {
		s := randomSnapshot(seed)
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkPlan(t, s) })
		if t.Failed() {
			return
		}
	}
}

func checkPlan(t *testing.T, s Snapshot) {
	batches, blocked := Plan(s)
	d := Decide(s)
	seen := map[string]bool{}
	for i, b := range batches {
		if len(b.Nodes) == 0 {
			t.Errorf("batch %d is empty", i)
		}
		perGroup := map[string]int{}
		for _, n := range b.Nodes {
			perGroup[n.Group]++
		}
		for g, c := range perGroup {
			if c > d.Group(g).MaxUnavailable {
				t.Errorf("batch %d approves %d nodes of group %s, budget %d", i, c, g, d.Group(g).MaxUnavailable)
			}
		}
		if i > 0 && b.NotBefore.Before(batches[i-1].NotBefore) {
			t.Errorf("batch %d starts before batch %d", i, i-1)
		}
		for _, n := range b.Nodes {
			if seen[n.Name] {
				t.Errorf("node %s planned twice", n.Name)
			}
			seen[n.Name] = true
		}
	}
	for _, w := range blocked {
		if seen[w.Node] {
			t.Errorf("node %s is both planned and blocked (%s)", w.Node, w.Message)
		}
		seen[w.Node] = true
	}
	for _, n := range s.Nodes {
		if n.Needs() && !n.HoldsSlot() && !seen[n.Name] {
			t.Errorf("needing node %s is neither planned nor blocked", n.Name)
		}
	}
}
