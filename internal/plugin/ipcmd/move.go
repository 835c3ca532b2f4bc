package ipcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/plugin"
)

const moveExample = `  # Move IP "web" to its first standby and wait until it answers there
  kubectl kubext ip move web

  # Move it to a particular standby (namespace/pod; without a namespace, the
  # one of -n or of the current context)
  kubectl kubext ip move web --to prod/web-2

  # Only ask for the move, don't wait
  kubectl kubext ip move web --wait=false`

// defaultSettle is how long `ip move` waits, after the controller has
// removed the move request, for the status to name the new holder before
// it concludes that the move was refused.
const defaultSettle = 2 * time.Second

// moveOptions are the flags of `ip move`.
type moveOptions struct {
	env     *plugin.Env
	to      string
	wait    bool
	timeout time.Duration
	// settle: see defaultSettle.
	settle time.Duration
}

func newMoveCommand(env *plugin.Env) *cobra.Command {
	o := &moveOptions{env: env, settle: defaultSettle}
	cmd := &cobra.Command{
		Use:   "move NAME [--to NAMESPACE/POD]",
		Short: "Move an IP to one of its standby pods now",
		Long: `Move an IP to one of its standby pods, e.g. before draining the holder's node.

Without --to the first standby takes over (status.standbys[0], the one that
would take over on a failure). The pod must be a standby: a Ready claimant on
a healthy node the pool allows; anything else is refused here, before asking.

The command sets the annotation ip.kubext.io/move-to on the IP. The
controller honours it once and removes it: it asks the current node to
release the address, then the new holder's node to attach it. With --wait
(the default) the command follows that until the IP is Ready on the new
node, and reports how long it took. If the controller refuses the move, the
command says why.`,
		Example: moveExample,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args[0])
		},
		ValidArgsFunction: completeIPNames(env),
	}
	cmd.Flags().StringVar(&o.to, "to", "", "The standby pod to move to, as NAMESPACE/POD (default: the first standby).")
	cmd.Flags().BoolVar(&o.wait, "wait", true, "Wait until the IP is Ready on the new holder's node.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 30*time.Second, "How long to wait with --wait.")
	return cmd
}

func (o *moveOptions) run(ctx context.Context, name string) error {
	c, err := o.env.Client()
	if err != nil {
		return err
	}
	ip := &ipv1.IP{}
	if err := c.Get(ctx, types.NamespacedName{Name: name}, ip); err != nil {
		return getError(name, err)
	}
	ns := ""
	if o.to != "" && !strings.Contains(o.to, "/") {
		if ns, err = o.env.Namespace(); err != nil {
			return err
		}
	}
	target, err := moveTarget(ip, o.to, ns)
	if err != nil {
		return err
	}
	start := o.env.Now()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{ipv1.AnnotationMoveTo: target}}})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, ip, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("requesting the move: %w", err)
	}
	fmt.Fprintf(o.env.Out, "Moving IP %s (%s) from %s on node %s to %s.\n",
		ip.Name, orDash(ip.Status.Address), orNone(ip.Status.Pod), orDash(ip.Status.Node), target)
	if !o.wait {
		fmt.Fprintf(o.env.Out, "Requested (annotation %s=%s). Follow it with: kubectl kubext ip explain %s\n", ipv1.AnnotationMoveTo, target, ip.Name)
		return nil
	}
	return o.follow(ctx, c, ip, target, start)
}

// moveTarget is the pod to move ip to: to (NAMESPACE/POD, or POD in
// namespace), or the first standby when to is empty. It refuses anything
// but a current standby, with the reason.
func moveTarget(ip *ipv1.IP, to, namespace string) (string, error) {
	standbys := ip.Status.Standbys
	if to != "" && !strings.Contains(to, "/") {
		to = namespace + "/" + to
	}
	if pending := ip.Annotations[ipv1.AnnotationMoveTo]; pending != "" && (to == "" || pending != to) {
		return "", fmt.Errorf("a move of IP %s to %s is already pending; wait for the controller, or withdraw it with: kubectl annotate ips %s %s-",
			ip.Name, pending, ip.Name, ipv1.AnnotationMoveTo)
	}
	if to == "" {
		if len(standbys) == 0 {
			return "", fmt.Errorf("IP %s has no standby to move to (holder: %s). A standby is another pod claiming the IP that is Ready on a healthy node the pool allows; see why there is none with: kubectl kubext ip explain %s",
				ip.Name, orNone(ip.Status.Pod), ip.Name)
		}
		return standbys[0], nil
	}
	if to == ip.Status.Pod {
		return "", fmt.Errorf("%s already holds IP %s", to, ip.Name)
	}
	if !slices.Contains(standbys, to) {
		list := "it has none"
		if len(standbys) > 0 {
			list = "they are: " + strings.Join(standbys, ", ")
		}
		return "", fmt.Errorf("%s is not a standby of IP %s (%s); see why with: kubectl kubext ip explain %s", to, ip.Name, list, ip.Name)
	}
	return to, nil
}

// moveStep is how far a move has come, as the IP's status shows it.
type moveStep int

const (
	// stepRequested: the annotation is set; the controller has not acted.
	stepRequested moveStep = iota
	// stepReleasing: the target is the holder-to-be; the old node has not
	// let go of the address yet.
	stepReleasing
	// stepAttaching: the target's node is chosen; its agent has not
	// confirmed yet.
	stepAttaching
	// stepConfirming: the agent confirmed; the IP is not Ready yet.
	stepConfirming
	// stepDone: the target holds the IP and it is Ready.
	stepDone
	// stepNotMoving: the controller removed the request, but the target is
	// not the holder.
	stepNotMoving
)

// moveProgress reads how far the move of ip to target has come, and the
// line to print for it.
func moveProgress(ip *ipv1.IP, target string) (moveStep, string) {
	st := ip.Status
	addr := orDash(st.Address)
	if st.Pod != target {
		if _, pending := ip.Annotations[ipv1.AnnotationMoveTo]; pending {
			return stepRequested, "waiting for the controller to act on the request"
		}
		return stepNotMoving, ""
	}
	switch {
	case st.AttachedNode != "" && st.AttachedNode != st.Node:
		return stepReleasing, fmt.Sprintf("waiting for node %s to release %s", st.AttachedNode, addr)
	case st.Node == "":
		return stepAttaching, "waiting for the controller to place the address on the new holder's node"
	case st.AttachedNode != st.Node:
		return stepAttaching, fmt.Sprintf("waiting for the agent on node %s to attach %s", st.Node, addr)
	case !meta.IsStatusConditionTrue(st.Conditions, ipv1.ConditionReady):
		return stepConfirming, fmt.Sprintf("node %s confirmed %s; waiting for the IP to turn Ready", st.Node, addr)
	}
	return stepDone, fmt.Sprintf("attached on node %s", st.Node)
}

// follow prints the move's progress until the target holds the IP and it is
// Ready, the controller refuses, or the timeout runs out. It follows the IP
// with client-go's watch.UntilWithSync, which lists it, watches it, and
// lists again whenever a watch ends or expires.
func (o *moveOptions) follow(ctx context.Context, c client.WithWatch, ip *ipv1.IP, target string, start time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// A move the controller dropped shows as no change for the settle time:
	// the timer stops the watch then, and refused says so.
	watching, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	var (
		settle  *time.Timer
		settled atomic.Bool
		last    string
		step    moveStep
	)
	observe := func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			return false, errDeletedWhileWaiting
		}
		cur, ok := ev.Object.(*ipv1.IP)
		if !ok {
			return false, nil
		}
		ip = cur
		var line string
		step, line = moveProgress(ip, target)
		if line != "" && line != last {
			fmt.Fprintf(o.env.Out, "[%s] %s\n", elapsed(o.env.Now().Sub(start)), line)
			last = line
		}
		switch {
		case step == stepNotMoving && settle == nil:
			settle = time.AfterFunc(o.settle, func() { settled.Store(true); stopWatching() })
		case step != stepNotMoving && settle != nil:
			settle.Stop()
			settle = nil
		}
		return step == stepDone, nil
	}
	exists := func(store cache.Store) (bool, error) {
		if _, ok, _ := store.GetByKey(ip.Name); !ok {
			return false, errDeletedWhileWaiting
		}
		return false, nil
	}
	_, err := watchtools.UntilWithSync(watching, ipListWatch(c, ip.Name), &ipv1.IP{}, exists, observe)
	if settle != nil {
		settle.Stop()
	}
	switch {
	case err == nil:
	case settled.Load():
		return o.refused(ctx, c, ip, target)
	case ctx.Err() != nil:
		msg := fmt.Sprintf("timed out after %s waiting for IP %s to move to %s", o.timeout, ip.Name, target)
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			msg = fmt.Sprintf("interrupted while waiting for IP %s to move to %s", ip.Name, target)
		}
		if last != "" {
			msg += " (last: " + last + ")"
		}
		if step == stepRequested {
			msg += fmt.Sprintf(". The controller has not acted on the request: is the kubext manager running? The request stays; withdraw it with: kubectl annotate ips %s %s-",
				ip.Name, ipv1.AnnotationMoveTo)
		}
		return errors.New(msg)
	default:
		return fmt.Errorf("IP %s: %w", ip.Name, err)
	}
	fmt.Fprintf(o.env.Out, "IP %s (%s) moved to %s on node %s in %s.\n",
		ip.Name, ip.Status.Address, target, ip.Status.Node, elapsed(o.env.Now().Sub(start)))
	return nil
}

// refused reports a move the controller dropped, with its MoveRefused event
// when there is one.
func (o *moveOptions) refused(ctx context.Context, c client.Reader, ip *ipv1.IP, target string) error {
	fmt.Fprintf(o.env.Out, "The controller removed the move request without moving IP %s to %s; it is held by %s on node %s.\n",
		ip.Name, target, orNone(ip.Status.Pod), orDash(ip.Status.Node))
	events, err := ipEvents(ctx, c, ip)
	switch e := latestRefusal(events); {
	case err != nil:
		fmt.Fprintf(o.env.Out, "Could not read its events: %v\n", err)
	case e != nil:
		fmt.Fprintf(o.env.Out, "Warning %s (%s ago): %s\n", e.Reason, since(o.env.Now().Sub(eventTime(e))), e.Note)
	default:
		fmt.Fprintln(o.env.Out, "No MoveRefused event was found.")
	}
	return fmt.Errorf("move of IP %s to %s refused; see: kubectl kubext ip explain %s", ip.Name, target, ip.Name)
}

// errDeletedWhileWaiting is the IP being deleted during a move.
var errDeletedWhileWaiting = errors.New("deleted while waiting")

// ipListWatch lists and watches the IP of name only.
func ipListWatch(c client.WithWatch, name string) cache.ListerWatcher {
	only := client.MatchingFields{"metadata.name": name}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := &ipv1.IPList{}
			err := c.List(ctx, list, only, &client.ListOptions{Raw: &opts})
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, &ipv1.IPList{}, only, &client.ListOptions{Raw: &opts})
		},
	}
}

// elapsed formats a move's duration to the millisecond.
func elapsed(d time.Duration) string { return d.Round(time.Millisecond).String() }

// getError explains a failed read of an IP.
func getError(name string, err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("IP %q not found (list them with: kubectl kubext ip list)", name)
	}
	return fmt.Errorf("reading IP %s: %w", name, err)
}
