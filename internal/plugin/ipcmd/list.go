package ipcmd

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/plugin"
)

const listExample = `  # List all static IPs
  kubectl kubext ip list

  # Show every standby and the Ready message too
  kubectl kubext ip list -o wide

  # Only the IPs labelled team=payments, as YAML
  kubectl kubext ip list -l team=payments -o yaml

  # Just the names, for scripts
  kubectl kubext ip list -o name`

// listOptions are the flags of `ip list` (and of `ip` alone, which lists).
type listOptions struct {
	env        *plugin.Env
	printFlags *genericclioptions.PrintFlags
	selector   string
	noHeaders  bool
}

func newListOptions(env *plugin.Env) *listOptions {
	return &listOptions{env: env, printFlags: genericclioptions.NewPrintFlags("").WithTypeSetter(plugin.Scheme)}
}

func newListCommand(env *plugin.Env) *cobra.Command {
	o := newListOptions(env)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls", "get"},
		Short:   "List static IPs: address, holder pod, node, standbys, readiness",
		Long: `List the static IPs (ip.kubext.io IP objects).

HOLDER is the pod the address is attached for and NODE the node that should
answer for it (status.node); ATTACHED is the node whose agent has confirmed
it answers (status.attachedNode). The two differ while the address moves.
STANDBYS are the other Ready claimants, in the order they would take over:
the first one and how many more (-o wide lists them all). READY shows the
reason when the IP is not Ready; "kubectl kubext ip explain NAME" says why.`,
		Example: listExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context())
		},
	}
	o.addFlags(cmd)
	return cmd
}

func (o *listOptions) addFlags(cmd *cobra.Command) {
	o.printFlags.AddFlags(cmd)
	out := cmd.Flags().Lookup("output")
	out.Usage = fmt.Sprintf("Output format. One of: (wide, %s).", strings.Join(o.printFlags.AllowedFormats(), ", "))
	cmd.Flags().StringVarP(&o.selector, "selector", "l", "", "Label selector to filter IPs on, e.g. -l key1=value1,key2=value2.")
	cmd.Flags().BoolVar(&o.noHeaders, "no-headers", false, "Don't print headers in the table output.")
}

func (o *listOptions) run(ctx context.Context) error {
	var opts []client.ListOption
	if o.selector != "" {
		sel, err := labels.Parse(o.selector)
		if err != nil {
			return fmt.Errorf("invalid --selector: %w", err)
		}
		opts = append(opts, client.MatchingLabelsSelector{Selector: sel})
	}
	c, err := o.env.Client()
	if err != nil {
		return err
	}
	ips := &ipv1.IPList{}
	if err := c.List(ctx, ips, opts...); err != nil {
		return fmt.Errorf("listing IPs: %w", err)
	}
	slices.SortFunc(ips.Items, func(a, b ipv1.IP) int { return strings.Compare(a.Name, b.Name) })
	return o.print(ips)
}

// print writes the IPs as a table, or through cli-runtime's printers for
// -o yaml, json, name, jsonpath and go-template.
func (o *listOptions) print(ips *ipv1.IPList) error {
	format := *o.printFlags.OutputFormat
	if format == "" || format == "wide" {
		if len(ips.Items) == 0 {
			fmt.Fprintln(o.env.ErrOut, "No IPs found.")
			return nil
		}
		p := printers.NewTablePrinter(printers.PrintOptions{Wide: format == "wide", NoHeaders: o.noHeaders})
		return p.PrintObj(ipTable(ips.Items, format == "wide", o.env.Now()), o.env.Out)
	}
	p, err := o.printFlags.ToPrinter()
	if err != nil {
		return err
	}
	// The type setter names only the list's kind; the items need theirs for
	// -o yaml to be re-appliable and for -o name.
	for i := range ips.Items {
		ips.Items[i].SetGroupVersionKind(ipv1.GroupVersion.WithKind("IP"))
	}
	if format != "name" {
		return p.PrintObj(ips, o.env.Out)
	}
	for i := range ips.Items {
		if err := p.PrintObj(&ips.Items[i], o.env.Out); err != nil {
			return err
		}
	}
	return nil
}

// ipTable turns IPs into the rows `ip list` prints. With wide, STANDBYS
// lists every standby and the Ready message and last move are added.
func ipTable(ips []ipv1.IP, wide bool, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name"},
		{Name: "Address", Type: "string"},
		{Name: "Pool", Type: "string"},
		{Name: "Holder", Type: "string"},
		{Name: "Node", Type: "string"},
		{Name: "Attached", Type: "string"},
		{Name: "Standbys", Type: "string"},
		{Name: "Ready", Type: "string"},
		{Name: "Age", Type: "string"},
		{Name: "Last Move", Type: "string", Priority: 1},
		{Name: "Message", Type: "string", Priority: 1},
	}}
	for i := range ips {
		ip := &ips[i]
		pool := ip.Status.Pool
		if pool == "" {
			pool = ip.Spec.Pool
		}
		lastMove := none
		if ip.Status.LastMoveTime != nil {
			lastMove = since(now.Sub(ip.Status.LastMoveTime.Time))
		}
		ready, message := readyColumns(ip)
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells: []any{
				ip.Name,
				orNoneCell(ip.Status.Address),
				orNoneCell(pool),
				orNoneCell(ip.Status.Pod),
				orNoneCell(ip.Status.Node),
				orNoneCell(ip.Status.AttachedNode),
				standbys(ip.Status.Standbys, wide),
				ready,
				since(now.Sub(ip.CreationTimestamp.Time)),
				lastMove,
				message,
			},
			Object: runtime.RawExtension{Object: ip},
		})
	}
	return t
}

// none is what kubectl prints for an empty cell.
const none = "<none>"

func orNoneCell(s string) string {
	if s == "" {
		return none
	}
	return s
}

// standbys is the STANDBYS cell: the first standby (the one `ip move` picks)
// and how many more, or all of them when wide.
func standbys(s []string, wide bool) string {
	switch {
	case len(s) == 0:
		return none
	case wide || len(s) == 1:
		return strings.Join(s, ",")
	}
	return fmt.Sprintf("%s +%d", s[0], len(s)-1)
}

// readyColumns are the READY cell ("True", or "False (Reason)") and the
// Ready message.
func readyColumns(ip *ipv1.IP) (string, string) {
	c := meta.FindStatusCondition(ip.Status.Conditions, ipv1.ConditionReady)
	switch {
	case c == nil:
		return "Unknown", "not processed by the controller yet"
	case c.Status == metav1.ConditionTrue:
		return string(c.Status), c.Message
	}
	return fmt.Sprintf("%s (%s)", c.Status, c.Reason), c.Message
}
