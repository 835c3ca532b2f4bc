// Package rebootcmd is the `kubectl kubext reboot` command group: ask for
// the reboot of nodes, show the rollout plan and its progress, pause and
// resume groups. Plan and status are computed with internal/rebootplan, the
// controller's own decision logic, from an uncached read of the Nodes and
// RebootGroups.
package rebootcmd

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/plugin"
	"github.com/kubext/kubext/internal/rebootplan"
)

const rebootExample = `  # Ask for a rolling reboot of two nodes
  kubectl kubext reboot node-1 node-2

  # What would happen, in which order, and what holds nodes back
  kubectl kubext reboot plan

  # Follow the rollout
  kubectl kubext reboot status

  # Stop approving reboots in group "workers", and go on later
  kubectl kubext reboot pause workers
  kubectl kubext reboot resume workers`

// NewCommand returns the `reboot` command: with node names it asks for
// their reboot; its subcommands plan, show status, pause and resume.
func NewCommand(env *plugin.Env) *cobra.Command {
	o := &requestOptions{env: env}
	nodeNames := plugin.CompleteNames(env, true, plugin.ListNames(
		func() *corev1.NodeList { return &corev1.NodeList{} },
		func(l *corev1.NodeList) []string {
			var names []string
			for i := range l.Items {
				names = append(names, l.Items[i].Name)
			}
			return names
		}))
	cmd := &cobra.Command{
		Use:   "reboot NODE... | plan | status | pause GROUP | resume GROUP | cancel NODE...",
		Short: "Coordinated node reboots: ask for one, plan, follow, pause and resume",
		Long: `Ask for a coordinated reboot of nodes, and follow and steer the rollout.

"kubectl kubext reboot NODE..." sets the annotation reboot.kubext.io/needed=true
on each node, like "kubectl annotate node NODE reboot.kubext.io/needed=true".
The reboot controller then approves the nodes group by group, never more
than a group's maxUnavailable unavailable at once and only inside its
maintenance windows; it cordons and drains each approved node, the node's
reboot agent reboots it, and once it is back with a new boot ID and has
stayed Ready for the group's soak time, it is uncordoned.`,
		Example: rebootExample,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args)
		},
		ValidArgsFunction: nodeNames,
	}
	cmd.AddCommand(newPlanCommand(env), newStatusCommand(env), newPauseCommand(env, true), newPauseCommand(env, false),
		newCancelCommand(env, nodeNames))
	return cmd
}

type requestOptions struct{ env *plugin.Env }

// run asks for the reboot of each node and says what comes next.
func (o *requestOptions) run(ctx context.Context, names []string) error {
	c, err := o.env.Client()
	if err != nil {
		return err
	}
	if err := nodesExist(ctx, c, names); err != nil {
		return err
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true"}}}`, rebootv1.AnnotationNeeded)
	for _, name := range names {
		node := &corev1.Node{}
		if err := c.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
			return err
		}
		n := rebootplan.NodeFrom(node)
		switch {
		case n.HoldsSlot():
			fmt.Fprintf(o.env.Out, "node/%s is already rebooting.\n", name)
			continue
		case n.Needs():
			fmt.Fprintf(o.env.Out, "node/%s already asks for a reboot (%s=%s).\n", name, rebootv1.AnnotationNeeded, node.Annotations[rebootv1.AnnotationNeeded])
			continue
		}
		if err := c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return fmt.Errorf("asking for the reboot of node %s: %w", name, err)
		}
		fmt.Fprintf(o.env.Out, "node/%s marked for reboot (%s=true).\n", name, rebootv1.AnnotationNeeded)
	}
	cl, err := read(ctx, c, o.env.Now())
	if err != nil {
		return err
	}
	d := rebootplan.Decide(cl.snapshot)
	byGroup := groupOf(d)
	for _, name := range names {
		g := byGroup[name]
		if g == nil {
			continue
		}
		s := nodeStatus(nodeByName(cl.snapshot, name), cl.nodes[name], g, d)
		fmt.Fprintf(o.env.Out, "  %s: group %s (%s); %s: %s\n", name, g.Name, budget(g), strings.ToLower(string(orState(s.State))), s.Detail)
	}
	fmt.Fprintln(o.env.Out, `The reboot controller approves each node when its group has room; it then
cordons and drains the node, the node's agent reboots it, and the node is
uncordoned once it is back and has stayed Ready for the soak time.
Follow it with: kubectl kubext reboot status`)
	return nil
}

// nodesExist checks every name first, so that a typo does not leave half
// the nodes changed.
func nodesExist(ctx context.Context, c client.Reader, names []string) error {
	for _, name := range names {
		if err := c.Get(ctx, types.NamespacedName{Name: name}, &corev1.Node{}); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("node %q not found (see: kubectl get nodes)", name)
			}
			return err
		}
	}
	return nil
}

func nodeByName(s rebootplan.Snapshot, name string) rebootplan.Node {
	for _, n := range s.Nodes {
		if n.Name == name {
			return n
		}
	}
	return rebootplan.Node{Name: name}
}

func orState(s State) State {
	if s == StateNone {
		return "Idle"
	}
	return s
}

type pauseOptions struct {
	env   *plugin.Env
	pause bool
}

func newPauseCommand(env *plugin.Env, pause bool) *cobra.Command {
	o := &pauseOptions{env: env, pause: pause}
	cmd := &cobra.Command{
		Use:   "pause GROUP",
		Short: "Stop approving reboots in a group (reboots under way run to the end)",
		Long: `Stop approving new reboots in a group by setting its spec.paused. Reboots
already approved run to the end. "default" is the group of the nodes no
RebootGroup selects; pausing it creates the RebootGroup named default (with
the default settings) if there is none.`,
		Example: `  kubectl kubext reboot pause workers`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args[0])
		},
		ValidArgsFunction: plugin.CompleteNames(env, false, plugin.ListNames(
			func() *rebootv1.RebootGroupList { return &rebootv1.RebootGroupList{} },
			func(l *rebootv1.RebootGroupList) []string {
				// The implicit default group has no object until paused.
				names := []string{rebootv1.DefaultGroupName}
				for i := range l.Items {
					if l.Items[i].Name != rebootv1.DefaultGroupName {
						names = append(names, l.Items[i].Name)
					}
				}
				return names
			})),
	}
	if !pause {
		cmd.Use = "resume GROUP"
		cmd.Short = "Approve reboots in a paused group again"
		cmd.Long = `Clear a group's spec.paused, so that the reboot controller approves its nodes
again.`
		cmd.Example = `  kubectl kubext reboot resume workers`
	}
	return cmd
}

func (o *pauseOptions) run(ctx context.Context, name string) error {
	c, err := o.env.Client()
	if err != nil {
		return err
	}
	verb := map[bool]string{true: "paused", false: "resumed"}[o.pause]
	g := &rebootv1.RebootGroup{}
	err = c.Get(ctx, types.NamespacedName{Name: name}, g)
	switch {
	case apierrors.IsNotFound(err) && name == rebootv1.DefaultGroupName && o.pause:
		g = &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: rebootv1.RebootGroupSpec{Paused: true}}
		if err := c.Create(ctx, g); err != nil {
			return fmt.Errorf("creating RebootGroup %s: %w", name, err)
		}
		fmt.Fprintf(o.env.Out, "rebootgroup/%s created with the default settings, paused.\n", name)
		return nil
	case apierrors.IsNotFound(err) && name == rebootv1.DefaultGroupName:
		fmt.Fprintf(o.env.Out, "rebootgroup/%s is not paused (there is no RebootGroup named %s).\n", name, name)
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("RebootGroup %q not found (see: kubectl get rebootgroups)", name)
	case err != nil:
		return err
	case g.Spec.Paused == o.pause:
		fmt.Fprintf(o.env.Out, "rebootgroup/%s is already %s.\n", name, map[bool]string{true: "paused", false: "not paused"}[o.pause])
		return nil
	}
	patch := fmt.Appendf(nil, `{"spec":{"paused":%t}}`, o.pause)
	if err := c.Patch(ctx, g, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("setting spec.paused of RebootGroup %s: %w", name, err)
	}
	fmt.Fprintf(o.env.Out, "rebootgroup/%s %s.\n", name, verb)
	return nil
}
