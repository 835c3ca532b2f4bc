package rebootplan

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

func batchNames(bs []Batch) [][]string {
	var out [][]string
	for _, b := range bs {
		var names []string
		for _, n := range b.Nodes {
			names = append(names, n.Name)
		}
		out = append(out, names)
	}
	return out
}

func TestPlanTwoGroups(t *testing.T) {
	// The e2e scenario: 20 nodes, two groups with budgets 2 and 25%, all
	// needing a reboot.
	var nodes []Node
	for i := range 20 {
		pool := "a"
		if i >= 8 {
			pool = "b"
		}
		nodes = append(nodes, node(fmt.Sprintf("n%02d", i), label("pool", pool), needing))
	}
	groups := []rebootv1.RebootGroup{
		rg("a", selecting("pool", "a"), maxUnavailable(intstr.FromInt32(2))),
		rg("b", selecting("pool", "b"), maxUnavailable(intstr.FromString("25%"))), // 12 nodes: 3
	}
	s := Snapshot{Groups: groups, Nodes: nodes, Now: now}
	batches, blocked := Plan(s)
	if len(blocked) != 0 {
		t.Errorf("blocked = %v", blocked)
	}
	want := [][]string{
		{"n00", "n01", "n08", "n09", "n10"},
		{"n02", "n03", "n11", "n12", "n13"},
		{"n04", "n05", "n14", "n15", "n16"},
		{"n06", "n07", "n17", "n18", "n19"},
	}
	if got := batchNames(batches); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("batches = %v, want %v", got, want)
	}
	if s.Nodes[0].Annotations[rebootv1.AnnotationNeeded] != "true" {
		t.Error("Plan modified the snapshot")
	}
}

func TestPlan(t *testing.T) {
	tests := map[string]struct {
		groups  []rebootv1.RebootGroup
		nodes   []Node
		batches [][]string
		starts  []string // NotBefore of each batch, RFC 3339; empty = all at now
		blocked map[string]string
	}{
		"nothing to do": {nodes: []Node{node("a")}},
		"rebooting nodes finish first": {
			nodes:   []Node{node("a", rebooting), node("b", needing)},
			batches: [][]string{{"b"}},
		},
		"workers before control plane, control plane one by one": {
			groups:  []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(3)))},
			nodes:   []Node{node("cp1", controlPlane, needing), node("cp2", controlPlane, needing), node("w1", needing), node("w2", needing)},
			batches: [][]string{{"w1", "w2"}, {"cp1"}, {"cp2"}},
		},
		"waits for the window": {
			groups:  []rebootv1.RebootGroup{rg("default", windows(rebootv1.MaintenanceWindow{Start: "02:00", End: "04:00", TimeZone: "Europe/Oslo", Days: []rebootv1.Weekday{"Saturday"}}))},
			nodes:   []Node{node("a", needing), node("b", needing)},
			batches: [][]string{{"a"}, {"b"}},
			starts:  []string{"2026-05-09T00:00:00Z", "2026-05-09T00:00:00Z"},
		},
		"paused and failed nodes are reported": {
			groups:  []rebootv1.RebootGroup{rg("p", selecting("pool", "p"), paused), rg("default", func(g *rebootv1.RebootGroup) { g.Spec.MaxFailures = new(int32) })},
			nodes:   []Node{node("a", label("pool", "p"), needing), node("b", needing, failed), node("c", needing)},
			batches: [][]string{{"c"}},
			blocked: map[string]string{"a": "Paused", "b": "Last reboot failed"},
		},
		"a stuck node keeps the budget": {
			nodes:   []Node{node("s", ordered(2*time.Hour)), node("a", needing)},
			groups:  []rebootv1.RebootGroup{rg("default", func(g *rebootv1.RebootGroup) { g.Spec.MaxFailures = new(int32) })},
			blocked: map[string]string{"a": "Max unavailable reached"},
		},
		"a node down for another reason keeps using budget": {
			groups:  []rebootv1.RebootGroup{rg("default", maxUnavailable(intstr.FromInt32(2)))},
			nodes:   []Node{node("x", notReady), node("a", needing), node("b", needing)},
			batches: [][]string{{"a"}, {"b"}},
		},
		"overlapping node is reported": {
			groups:  []rebootv1.RebootGroup{rg("a", selecting("pool", "x")), rg("b", selecting("zone", "z"))},
			nodes:   []Node{node("n1", label("pool", "x"), label("zone", "z"), needing)},
			blocked: map[string]string{"n1": "Overlapping groups: a, b"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			batches, blocked := Plan(Snapshot{Groups: tc.groups, Nodes: tc.nodes, Now: now})
			if got := batchNames(batches); !slices.EqualFunc(got, tc.batches, slices.Equal) {
				t.Errorf("batches = %v, want %v", got, tc.batches)
			}
			for i, b := range batches {
				want := now
				if tc.starts != nil {
					want, _ = time.Parse(time.RFC3339, tc.starts[i])
				}
				if !b.NotBefore.Equal(want) {
					t.Errorf("batch %d NotBefore = %s, want %s", i, b.NotBefore.UTC().Format(time.RFC3339), want.Format(time.RFC3339))
				}
			}
			got := map[string]string{}
			for _, w := range blocked {
				got[w.Node] = w.Message
			}
			if len(got) != len(tc.blocked) {
				t.Errorf("blocked = %v, want %v", got, tc.blocked)
			}
			for n, msg := range tc.blocked {
				if !strings.HasPrefix(got[n], msg) {
					t.Errorf("node %s blocked with %q, want %q", n, got[n], msg)
				}
			}
		})
	}
}
