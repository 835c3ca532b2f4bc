package ipcmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/internal/plugin"
)

// agentComponent names the ip-agent's heartbeat Leases, ip-agent-<node>, as
// the IP controller reads them.
const agentComponent = "ip-agent"

func leaseName(node string) string { return heartbeat.LeaseName(agentComponent, node) }

const explainExample = `  # Why is IP "web" attached where it is, or not attached at all?
  kubectl kubext ip explain web

  # The agents' heartbeat Leases live in another namespace
  kubectl kubext ip explain web --heartbeat-namespace ops`

// explainOptions are the flags of `ip explain`.
type explainOptions struct {
	env            *plugin.Env
	leaseNamespace string
	output         plugin.Output
}

func newExplainCommand(env *plugin.Env) *cobra.Command {
	o := &explainOptions{env: env}
	cmd := &cobra.Command{
		Use:   "explain NAME",
		Short: "Explain why an IP is where it is, or why it is not attached",
		Long: `Explain one IP in plain words: its address and pool, each condition, the
holder pod and its node, whether the node agents involved are alive (from
their heartbeat Leases), every pod claiming the IP with its role (holder,
standby, or why it cannot hold the IP), and the IP's recent events.`,
		Example: explainExample,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args[0])
		},
		ValidArgsFunction: completeIPNames(env),
	}
	o.output.AddFlag(cmd)
	cmd.Flags().StringVar(&o.leaseNamespace, "heartbeat-namespace", "kubext-system",
		"Namespace of the ip-agents' heartbeat Leases (the manager's --heartbeat-namespace).")
	return cmd
}

func (o *explainOptions) run(ctx context.Context, name string) error {
	if err := o.output.Validate(); err != nil {
		return err
	}
	c, err := o.env.Client()
	if err != nil {
		return err
	}
	f, err := gather(ctx, c, name, o.leaseNamespace)
	if err != nil {
		return err
	}
	f.now = o.env.Now()
	if o.output.Structured() {
		return o.output.Print(o.env.Out, newExplanationReport(f))
	}
	_, err = fmt.Fprint(o.env.Out, explain(*f))
	return err
}

// completeIPNames suggests the IPs' names.
func completeIPNames(env *plugin.Env) cobra.CompletionFunc {
	return plugin.CompleteNames(env, false, plugin.ListNames(
		func() *ipv1.IPList { return &ipv1.IPList{} },
		func(l *ipv1.IPList) []string {
			var names []string
			for i := range l.Items {
				names = append(names, l.Items[i].Name)
			}
			return names
		}))
}

// gather reads everything explain needs about one IP.
func gather(ctx context.Context, c client.Reader, name, leaseNamespace string) (*facts, error) {
	f := &facts{ip: &ipv1.IP{}, nodes: map[string]*corev1.Node{}, leases: map[string]*coordinationv1.Lease{}, leaseNamespace: leaseNamespace}
	if err := c.Get(ctx, types.NamespacedName{Name: name}, f.ip); err != nil {
		return nil, getError(name, err)
	}
	pool := f.ip.Status.Pool
	if pool == "" {
		pool = f.ip.Spec.Pool
	}
	if pool != "" {
		p := &ipv1.IPPool{}
		if err := getOptional(ctx, c, types.NamespacedName{Name: pool}, p); err != nil {
			return nil, err
		} else if p.Name != "" {
			f.pool = p
		}
	}
	var err error
	if f.pods, err = claimingPods(ctx, c, name); err != nil {
		return nil, err
	}
	if f.claimPolicy().NeedsNamespaceLabels() {
		f.namespaceLabels = map[string]map[string]string{}
		for _, p := range f.pods {
			ns := &corev1.Namespace{}
			if err := getOptional(ctx, c, types.NamespacedName{Name: p.Namespace}, ns); err != nil {
				return nil, err
			}
			f.namespaceLabels[p.Namespace] = ns.Labels
		}
	}
	for _, node := range involvedNodes(f.ip, f.pods) {
		n := &corev1.Node{}
		if err := getOptional(ctx, c, types.NamespacedName{Name: node}, n); err != nil {
			return nil, err
		} else if n.Name != "" {
			f.nodes[node] = n
		}
		l := &coordinationv1.Lease{}
		if err := getOptional(ctx, c, types.NamespacedName{Namespace: leaseNamespace, Name: leaseName(node)}, l); err != nil {
			return nil, err
		} else if l.Name != "" {
			f.leases[node] = l
		}
	}
	if f.events, err = ipEvents(ctx, c, f.ip); err != nil {
		return nil, fmt.Errorf("listing events: %w", err)
	}
	return f, nil
}

// getOptional reads an object, leaving it empty when it does not exist.
func getOptional(ctx context.Context, c client.Reader, key types.NamespacedName, obj client.Object) error {
	if err := c.Get(ctx, key, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading %s: %w", key, err)
	}
	return nil
}

// claimingPods are the pods in every namespace that claim the IP. Annotations
// cannot be selected on by the API server, so only the pods' metadata is
// listed and the claimants are read in full.
func claimingPods(ctx context.Context, c client.Reader, ipName string) ([]corev1.Pod, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := c.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	var pods []corev1.Pod
	for _, m := range list.Items {
		if m.Annotations[ipv1.AnnotationIP] != ipName {
			continue
		}
		p := corev1.Pod{}
		if err := getOptional(ctx, c, types.NamespacedName{Namespace: m.Namespace, Name: m.Name}, &p); err != nil {
			return nil, err
		}
		if p.Name != "" {
			pods = append(pods, p)
		}
	}
	return pods, nil
}
