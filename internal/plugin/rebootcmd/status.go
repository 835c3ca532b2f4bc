package rebootcmd

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/plugin"
	"github.com/kubext/kubext/internal/rebootplan"
)

const statusExample = `  # Every group and every node the reboot protocol touches
  kubectl kubext reboot status

  # Every node, also those with nothing to report
  kubectl kubext reboot status --all`

type statusOptions struct {
	env    *plugin.Env
	all    bool
	output plugin.Output
}

func newStatusCommand(env *plugin.Env) *cobra.Command {
	o := &statusOptions{env: env}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each reboot group's progress and each node's reboot state",
		Long: `Show the reboot groups, including the implicit "default" group of the nodes no
RebootGroup selects, and where each node is in the reboot protocol.

For each group: its nodes, its budget (maxUnavailable resolved against the
group's size) and how many nodes are unavailable for any reason, how many
need a reboot, are rebooting, are done, failed or stuck, and the nodes
rebooting now. STATE is Paused, Halted, Invalid, OutsideWindow, RollingOut,
GateHeld (a health gate holds the group's waiting nodes; the gate and what
it found follow), Waiting or Idle.

For each group with a RebootGroup object, its rollout (kept in the group's
status, so it spans maintenance windows, pauses and controller restarts):
its number, when it started, DONE/TOTAL reboots, the nodes remaining and
failed, and STATE: Running, WaitingForWindow (until the next window opens),
Paused, Gated (by the health gate named), Halted, Invalid or Complete. The
implicit default group keeps no rollout record.

For each node with a reboot annotation: Needed (waits for approval, with the
reason), Approved, Draining, Rebooting, Soaking (back with a new boot ID,
waiting out the soak time), Done, Failed or Stuck.

Everything is computed here from the Nodes and RebootGroups, the way the
controller decides, so it is current even where the groups' status lags.`,
		Example: statusExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.all, "all", false, "List every node, also those the reboot protocol has not touched.")
	o.output.AddFlag(cmd)
	return cmd
}

func (o *statusOptions) run(ctx context.Context) error {
	if err := o.output.Validate(); err != nil {
		return err
	}
	c, err := o.env.Client()
	if err != nil {
		return err
	}
	cl, err := read(ctx, c, o.env.Now())
	if err != nil {
		return err
	}
	if o.output.Structured() {
		d, rows := statusRows(cl, o.all)
		return o.output.Print(o.env.Out, newStatusReport(d, rows, rollouts(cl, d), cl.snapshot.Now))
	}
	return writeStatus(o.env.Out, cl, o.all)
}

// statusRows decides and works out the state of each node: every node with
// all, else those the reboot protocol touches; sorted by group and name.
func statusRows(cl *cluster, all bool) (rebootplan.Decision, []NodeStatus) {
	d := rebootplan.Decide(cl.snapshot)
	byGroup := groupOf(d)
	var rows []NodeStatus
	for _, n := range cl.snapshot.Nodes {
		s := nodeStatus(n, cl.nodes[n.Name], byGroup[n.Name], d)
		if s.State != StateNone || all {
			rows = append(rows, s)
		}
	}
	slices.SortFunc(rows, func(a, b NodeStatus) int {
		return strings.Compare(a.Group+"/"+a.Node, b.Group+"/"+b.Node)
	})
	return d, rows
}

// writeStatus prints the group table and the node table.
func writeStatus(w io.Writer, cl *cluster, all bool) error {
	d, rows := statusRows(cl, all)
	now := cl.snapshot.Now
	p := printers.NewTablePrinter(printers.PrintOptions{})
	if err := p.PrintObj(groupTable(d, rows), w); err != nil {
		return err
	}
	for _, o := range d.Overlapping {
		fmt.Fprintf(w, "Node %s is selected by several groups (%s) and rebooted by none of them.\n", o.Node, strings.Join(o.Groups, ", "))
	}
	if ro := rollouts(cl, d); len(ro) > 0 {
		fmt.Fprintln(w)
		if err := p.PrintObj(rolloutTable(d, ro, now), w); err != nil {
			return err
		}
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "\nNo node needs a reboot or has been rebooted by kubext.")
		return nil
	}
	fmt.Fprintln(w)
	return p.PrintObj(nodeTable(rows, now), w)
}

// groupTable has one row per group. The counts follow RebootGroup's status
// fields.
func groupTable(d rebootplan.Decision, rows []NodeStatus) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Group", Type: "string"},
		{Name: "Nodes", Type: "integer"},
		{Name: "Max Unavailable", Type: "integer"},
		{Name: "Unavailable", Type: "integer"},
		{Name: "Needing", Type: "integer"},
		{Name: "Rebooting", Type: "integer"},
		{Name: "Done", Type: "integer"},
		{Name: "Failed", Type: "integer"},
		{Name: "Stuck", Type: "integer"},
		{Name: "State", Type: "string"},
		{Name: "Current", Type: "string"},
	}}
	for i := range d.Groups {
		g := &d.Groups[i]
		name := g.Name
		if g.Implicit {
			name += " (implicit)"
		}
		needing := 0
		for _, r := range rows {
			if r.Group == g.Name && r.State == StateNeeded {
				needing++
			}
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{
			name, len(g.Nodes), g.MaxUnavailable, len(g.Unavailable), needing, len(g.Rebooting),
			g.Done, len(g.Failed), len(g.Stuck), groupSummary(g), orDash(strings.Join(g.Rebooting, ",")),
		}})
	}
	return t
}

func nodeTable(rows []NodeStatus, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Node", Type: "string"},
		{Name: "Group", Type: "string"},
		{Name: "State", Type: "string"},
		{Name: "Since", Type: "string"},
		{Name: "Detail", Type: "string"},
	}}
	for _, r := range rows {
		state := string(r.State)
		if state == "" {
			state = "-"
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{r.Node, orDash(r.Group), state, age(now, r.Since), orDash(r.Detail)}})
	}
	return t
}

// rollouts are the groups' rollouts by group name, moved on from the
// record in each RebootGroup's status to what the nodes show now, as the
// controller's next look will write them (rebootplan.Track). Groups
// without a RebootGroup object, or that never had a rollout, have none.
func rollouts(cl *cluster, d rebootplan.Decision) map[string]*rebootv1.RolloutStatus {
	nodes := map[string]rebootplan.Node{}
	for _, n := range cl.snapshot.Nodes {
		nodes[n.Name] = n
	}
	out := map[string]*rebootv1.RolloutStatus{}
	for i := range cl.snapshot.Groups {
		g := &cl.snapshot.Groups[i]
		gd := d.Group(g.Name)
		if gd == nil {
			continue
		}
		if r := rebootplan.Track(g.Status.Rollout, gd, nodes, cl.snapshot.Now); r != nil {
			out[g.Name] = r
		}
	}
	return out
}

// rolloutTable has one row per group with a rollout.
func rolloutTable(d rebootplan.Decision, ro map[string]*rebootv1.RolloutStatus, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Group", Type: "string"},
		{Name: "Rollout", Type: "integer"},
		{Name: "Started", Type: "string"},
		{Name: "Done", Type: "string"},
		{Name: "Remaining", Type: "string"},
		{Name: "Failed", Type: "string"},
		{Name: "State", Type: "string"},
	}}
	for _, g := range d.Groups {
		r, ok := ro[g.Name]
		if !ok {
			continue
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{
			g.Name, r.Number, age(now, r.StartTime.Time) + " ago", fmt.Sprintf("%d/%d", r.Done, r.Total),
			countAndNames(r.Remaining, r.RemainingNodes), countAndNames(r.Failed, r.FailedNodes), rolloutState(r, now),
		}})
	}
	return t
}

// rolloutState is a rollout's state in a sentence: "WaitingForWindow
// until 2026-11-24T02:00:00Z (since 3h)", "Gated by ...", "Complete 5m ago".
func rolloutState(r *rebootv1.RolloutStatus, now time.Time) string {
	since := ""
	if r.WaitingSince != nil {
		since = " (since " + age(now, r.WaitingSince.Time) + ")"
	}
	switch r.State {
	case rebootv1.RolloutWaitingForWindow:
		if r.ResumeAt != nil {
			return fmt.Sprintf("WaitingForWindow until %s%s", stamp(r.ResumeAt.Time), since)
		}
		return "WaitingForWindow" + since + ": " + r.Message
	case rebootv1.RolloutGated:
		return "Gated by " + r.Message + since
	case rebootv1.RolloutComplete:
		if r.CompletionTime != nil {
			return "Complete " + age(now, r.CompletionTime.Time) + " ago"
		}
		return "Complete"
	case rebootv1.RolloutRunning:
		if r.Message == "" {
			return "Running"
		}
		return "Running: " + r.Message
	}
	return string(r.State) + since + ": " + r.Message
}

// countAndNames is "2 (a, b)", or "0"; long lists are cut after five
// names (-o yaml lists them all).
func countAndNames(n int32, names []string) string {
	if n == 0 {
		return "0"
	}
	if len(names) > 5 {
		return fmt.Sprintf("%d (%s, ...)", n, strings.Join(names[:5], ", "))
	}
	return fmt.Sprintf("%d (%s)", n, strings.Join(names, ", "))
}
