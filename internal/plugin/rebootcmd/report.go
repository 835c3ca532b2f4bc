package rebootcmd

import (
	"strings"
	"time"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/plugin"
	"github.com/kubext/kubext/internal/rebootplan"
)

// The documents `reboot status -o json|yaml` and `reboot plan -o json|yaml`
// print: the same facts as the tables, with names and lists rather than
// sentences where a script would otherwise parse them.

// statusReport is `reboot status` for machines.
type statusReport struct {
	plugin.Report
	Time        time.Time     `json:"time"`
	Groups      []groupReport `json:"groups"`
	Nodes       []NodeStatus  `json:"nodes"`
	Overlapping []overlap     `json:"overlapping,omitempty"`
}

// groupReport is one group's row of `reboot status`.
type groupReport struct {
	Name     string `json:"name"`
	Implicit bool   `json:"implicit,omitempty"`
	// State is Paused, Halted, Invalid, OutsideWindow, RollingOut,
	// GateHeld, Waiting or Idle; StateMessage says more when there is more to say.
	State          string   `json:"state"`
	StateMessage   string   `json:"stateMessage,omitempty"`
	Nodes          int      `json:"nodes"`
	MaxUnavailable int      `json:"maxUnavailable"`
	Unavailable    []string `json:"unavailable"`
	Needing        int      `json:"needing"`
	Rebooting      []string `json:"rebooting"`
	Done           int      `json:"done"`
	Failed         []string `json:"failed"`
	Stuck          []string `json:"stuck"`
	// Rollout is the group's current or last rollout, as its status
	// records it moved on to now; none for the implicit default group or
	// a group that never had one.
	Rollout *rebootv1.RolloutStatus `json:"rollout,omitempty"`
}

type overlap struct {
	Node   string   `json:"node"`
	Groups []string `json:"groups"`
}

func overlaps(d rebootplan.Decision) []overlap {
	var out []overlap
	for _, o := range d.Overlapping {
		out = append(out, overlap{Node: o.Node, Groups: o.Groups})
	}
	return out
}

// splitSummary splits groupSummary's "State: message" in two.
func splitSummary(g *rebootplan.GroupDecision) (string, string) {
	state, message, _ := strings.Cut(groupSummary(g), ": ")
	return state, message
}

func newStatusReport(d rebootplan.Decision, rows []NodeStatus, ro map[string]*rebootv1.RolloutStatus, now time.Time) statusReport {
	r := statusReport{Report: plugin.NewReport("RebootStatus"), Time: now.UTC(), Nodes: rows, Overlapping: overlaps(d)}
	if r.Nodes == nil {
		r.Nodes = []NodeStatus{}
	}
	for i := range d.Groups {
		g := &d.Groups[i]
		state, message := splitSummary(g)
		needing := 0
		for _, row := range rows {
			if row.Group == g.Name && row.State == StateNeeded {
				needing++
			}
		}
		r.Groups = append(r.Groups, groupReport{
			Name: g.Name, Implicit: g.Implicit, State: state, StateMessage: message,
			Nodes: len(g.Nodes), MaxUnavailable: g.MaxUnavailable, Unavailable: nonNil(g.Unavailable),
			Needing: needing, Rebooting: nonNil(g.Rebooting), Done: g.Done, Failed: nonNil(g.Failed), Stuck: nonNil(g.Stuck),
			Rollout: ro[g.Name],
		})
	}
	return r
}

// planReport is `reboot plan` for machines.
type planReport struct {
	plugin.Report
	Time        time.Time         `json:"time"`
	Groups      []groupPlanReport `json:"groups"`
	Overlapping []overlap         `json:"overlapping,omitempty"`
}

type groupPlanReport struct {
	Name           string        `json:"name"`
	Implicit       bool          `json:"implicit,omitempty"`
	State          string        `json:"state"`
	StateMessage   string        `json:"stateMessage,omitempty"`
	Nodes          int           `json:"nodes"`
	MaxUnavailable int           `json:"maxUnavailable"`
	Unavailable    []string      `json:"unavailable"`
	RebootingNow   []string      `json:"rebootingNow"`
	Batches        []batchReport `json:"batches"`
	Blocked        []blocked     `json:"blocked"`
}

// batchReport is one batch of a group. Number counts across the groups, as
// the batches of the whole rollout do.
type batchReport struct {
	Number int `json:"number"`
	// NotBefore is the earliest the batch can start: now, or when the
	// maintenance window it waits for opens.
	NotBefore time.Time `json:"notBefore"`
	Nodes     []string  `json:"nodes"`
}

type blocked struct {
	Node    string `json:"node"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func newPlanReport(s rebootplan.Snapshot) planReport {
	d := rebootplan.Decide(s)
	batches, waits := rebootplan.Plan(s)
	r := planReport{Report: plugin.NewReport("RebootPlan"), Time: s.Now.UTC(), Overlapping: overlaps(d), Groups: []groupPlanReport{}}
	for i := range d.Groups {
		g := &d.Groups[i]
		state, message := splitSummary(g)
		gr := groupPlanReport{
			Name: g.Name, Implicit: g.Implicit, State: state, StateMessage: message,
			Nodes: len(g.Nodes), MaxUnavailable: g.MaxUnavailable, Unavailable: nonNil(g.Unavailable),
			RebootingNow: nonNil(g.Rebooting), Batches: []batchReport{}, Blocked: []blocked{},
		}
		for b, batch := range batches {
			var nodes []string
			for _, n := range batch.Nodes {
				if n.Group == g.Name {
					nodes = append(nodes, n.Name)
				}
			}
			if len(nodes) > 0 {
				gr.Batches = append(gr.Batches, batchReport{Number: b + 1, NotBefore: batch.NotBefore.UTC(), Nodes: nodes})
			}
		}
		for _, w := range waits {
			if w.Group == g.Name {
				gr.Blocked = append(gr.Blocked, blocked{Node: w.Node, Reason: string(w.Reason), Message: w.Message})
			}
		}
		r.Groups = append(r.Groups, gr)
	}
	return r
}

// nonNil makes an empty list print as [] rather than null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
