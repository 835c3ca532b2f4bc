package rebootcmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubext/kubext/internal/plugin"
	"github.com/kubext/kubext/internal/rebootplan"
)

const planExample = `  # Which nodes would reboot in which order, and what holds the others back
  kubectl kubext reboot plan`

type planOptions struct {
	env    *plugin.Env
	output plugin.Output
}

func newPlanCommand(env *plugin.Env) *cobra.Command {
	o := &planOptions{env: env}
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Dry run: the batches in which the nodes needing a reboot would reboot, and what blocks",
		Long: `Show how the reboot controller would roll through the nodes that need a
reboot, without changing anything: group by group, the batches in which
nodes would be approved (at most maxUnavailable of a group unavailable at
once, control-plane nodes one at a time and never with workers, only inside
maintenance windows), and the nodes that would not be rebooted, with why
(paused, halted, failed, overlapping groups, a blocking pod, ...).

The plan reads the Nodes and RebootGroups now and assumes every reboot
succeeds and its node comes back Ready before the next batch; the real
rollout waits for drains, reboots and soak times in between.`,
		Example: planExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context())
		},
	}
	o.output.AddFlag(cmd)
	return cmd
}

func (o *planOptions) run(ctx context.Context) error {
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
		return o.output.Print(o.env.Out, newPlanReport(cl.snapshot))
	}
	return writePlan(o.env.Out, cl.snapshot)
}

// writePlan prints the plan of s group by group: the group's budget, the
// nodes rebooting now, then its batches and its blocked nodes.
func writePlan(w io.Writer, s rebootplan.Snapshot) error {
	d := rebootplan.Decide(s)
	batches, blocked := rebootplan.Plan(s)
	if len(batches) == 0 && len(blocked) == 0 {
		needsNothing := true
		for _, g := range d.Groups {
			needsNothing = needsNothing && len(g.Rebooting) == 0
		}
		if needsNothing {
			fmt.Fprintln(w, "No node needs a reboot.")
			return nil
		}
	}
	fmt.Fprintf(w, "Plan at %s (dry run; assumes every reboot succeeds):\n", stamp(s.Now))
	// One table across the groups, so that the columns line up.
	type section struct {
		header string
		lines  [][3]string
	}
	var sections []section
	var width [2]int
	for i := range d.Groups {
		g := &d.Groups[i]
		var lines [][3]string
		if len(g.Rebooting) > 0 {
			lines = append(lines, [3]string{"rebooting now", "", strings.Join(g.Rebooting, " ")})
		}
		for b, batch := range batches {
			var nodes []string
			for _, n := range batch.Nodes {
				if n.Group == g.Name {
					nodes = append(nodes, n.Name)
				}
			}
			if len(nodes) > 0 {
				lines = append(lines, [3]string{fmt.Sprintf("batch %d", b+1), when(batches, b, s.Now), strings.Join(nodes, " ")})
			}
		}
		for _, wt := range blocked {
			if wt.Group == g.Name {
				lines = append(lines, [3]string{"blocked", wt.Node, wt.Message})
			}
		}
		if len(lines) == 0 {
			continue
		}
		for _, l := range lines {
			width[0], width[1] = max(width[0], len(l[0])), max(width[1], len(l[1]))
		}
		sections = append(sections, section{header: fmt.Sprintf("Group %s: %s", g.Name, budget(g)), lines: lines})
	}
	for _, sec := range sections {
		fmt.Fprintf(w, "\n%s\n", sec.header)
		for _, l := range sec.lines {
			fmt.Fprintf(w, "  %-*s  %-*s  %s\n", width[0], l[0], width[1], l[1], l[2])
		}
	}
	for _, o := range d.Overlapping {
		fmt.Fprintf(w, "\nNode %s is selected by several groups (%s) and rebooted by none of them until that is resolved.\n", o.Node, strings.Join(o.Groups, ", "))
	}
	return nil
}

// when says when batch b can start: now, once the one before is done, or
// when a maintenance window opens.
func when(batches []rebootplan.Batch, b int, now time.Time) string {
	start := batches[b].NotBefore
	switch {
	case b == 0 && !start.After(now):
		return "now"
	case b > 0 && start.Equal(batches[b-1].NotBefore):
		return fmt.Sprintf("after batch %d", b)
	}
	return "window opens " + stamp(start)
}

// budget describes a group's size and budget.
func budget(g *rebootplan.GroupDecision) string {
	var b strings.Builder
	if g.Implicit {
		b.WriteString("(implicit) ")
	}
	fmt.Fprintf(&b, "%d nodes, maxUnavailable %d, unavailable now %d", len(g.Nodes), g.MaxUnavailable, len(g.Unavailable))
	if len(g.Unavailable) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(g.Unavailable, ", "))
	}
	if s := groupSummary(g); s != "RollingOut" && s != "Waiting" && s != "Idle" {
		b.WriteString("; " + s)
	}
	return b.String()
}
