package rebootcmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/plugin"
)

type cancelOptions struct{ env *plugin.Env }

func newCancelCommand(env *plugin.Env, nodeNames cobra.CompletionFunc) *cobra.Command {
	o := &cancelOptions{env: env}
	return &cobra.Command{
		Use:   "cancel NODE...",
		Short: "Withdraw nodes' reboot requests, undoing an approval not yet carried out",
		Long: `Withdraw the reboot request of each node by setting reboot.kubext.io/needed=false.

Until the reboot is ordered, this undoes everything kubext did: the
controller stops the drain, gives the group's slot back and uncordons the
node if it had cordoned it (pods already evicted stay where they were
rescheduled). Once the reboot is ordered it cannot be called back, since the
node's agent may already be rebooting the machine: the command says so and
changes nothing, and kubext verifies the reboot and uncordons the node when
it is back.

The node's reboot agent does not ask again for its sentinel file while
needed=false; "kubectl kubext reboot NODE" (or removing the annotation)
lets it.`,
		Example: `  kubectl kubext reboot cancel node-3`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args)
		},
		ValidArgsFunction: nodeNames,
	}
}

func (o *cancelOptions) run(ctx context.Context, names []string) error {
	c, err := o.env.Client()
	if err != nil {
		return err
	}
	if err := nodesExist(ctx, c, names); err != nil {
		return err
	}
	for _, name := range names {
		msg, err := o.cancel(ctx, c, name)
		if err != nil {
			return fmt.Errorf("cancelling the reboot of node %s: %w", name, err)
		}
		fmt.Fprintln(o.env.Out, msg)
	}
	return nil
}

// cancel withdraws one node's request, conditional on the version read: if
// the controller orders the reboot in between, the write fails and the
// node is read again, so the answer is never "withdrawn" for a reboot that
// goes ahead.
func (o *cancelOptions) cancel(ctx context.Context, c client.Client, name string) (string, error) {
	for range 5 {
		node := &corev1.Node{}
		if err := c.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
			return "", err
		}
		ann := node.Annotations
		if ordered, ok := ann[rebootv1.AnnotationNow]; ok {
			return fmt.Sprintf("node/%s: its reboot was ordered at %s and cannot be called back (the agent may be rebooting it); "+
				"kubext verifies it and uncordons the node when it is back.", name, ordered), nil
		}
		_, approved := ann[rebootv1.AnnotationInProgress]
		if rebootv1.Declined(ann) && !approved {
			return fmt.Sprintf("node/%s does not ask for a reboot (%s=%s).", name, rebootv1.AnnotationNeeded, ann[rebootv1.AnnotationNeeded]), nil
		}
		changed := node.DeepCopy()
		if changed.Annotations == nil {
			changed.Annotations = map[string]string{}
		}
		// needed=false and nothing else: the controller forgets the
		// node's place in the queue (needed-since), which only it may
		// write (config/policy/reboot-order.yaml).
		changed.Annotations[rebootv1.AnnotationNeeded] = "false"
		err := c.Patch(ctx, changed, client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{}))
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return "", err
		}
		if approved {
			return fmt.Sprintf("node/%s: reboot request withdrawn (%s=false); it was approved, so the controller stops its drain, "+
				"gives the slot back and uncordons the node if it cordoned it.", name, rebootv1.AnnotationNeeded), nil
		}
		return fmt.Sprintf("node/%s: reboot request withdrawn (%s=false); its agent does not ask again until the annotation "+
			"is removed or \"kubectl kubext reboot %s\" asks.", name, rebootv1.AnnotationNeeded, name), nil
	}
	return "", fmt.Errorf("node %s kept changing; try again", name)
}
