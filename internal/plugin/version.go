package plugin

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubext/kubext/internal/version"
)

// managerSelector finds kubext's manager Deployments however they were
// installed (kustomize, installer or chart keep these labels).
var managerSelector = client.MatchingLabels{"app.kubernetes.io/name": "kubext", "control-plane": "controller-manager"}

// versionReport is `kubectl kubext version -o json|yaml`.
type versionReport struct {
	Report
	Client version.Info `json:"client"`
	// Installed are the kubext managers found in the cluster; absent with
	// --client.
	Installed []installed `json:"installed,omitempty"`
	// InstalledError says why the cluster could not be asked.
	InstalledError string `json:"installedError,omitempty"`
}

type installed struct {
	Namespace     string   `json:"namespace"`
	Name          string   `json:"name"`
	Images        []string `json:"images"`
	Replicas      int32    `json:"replicas"`
	ReadyReplicas int32    `json:"readyReplicas"`
}

// NewVersionCommand returns `kubectl kubext version`: this plugin's build
// and the kubext installed in the cluster, so a mismatch is visible before
// it confuses.
func NewVersionCommand(env *Env) *cobra.Command {
	var (
		clientOnly bool
		output     Output
	)
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and the kubext installed in the cluster",
		Example: `  kubectl kubext version
  kubectl kubext version --client -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			r := versionReport{Report: NewReport("Version"), Client: version.Get()}
			if !clientOnly {
				r.Installed, r.InstalledError = findInstalled(cmd.Context(), env)
			}
			if output.Structured() {
				return output.Print(env.Out, r)
			}
			fmt.Fprintf(env.Out, "Plugin: %s\n", r.Client)
			switch {
			case clientOnly:
			case r.InstalledError != "":
				fmt.Fprintf(env.Out, "Installed: unknown (%s)\n", r.InstalledError)
			case len(r.Installed) == 0:
				fmt.Fprintln(env.Out, "Installed: no kubext manager found in the cluster")
			}
			for _, m := range r.Installed {
				fmt.Fprintf(env.Out, "Installed: %s/%s %v (%d/%d ready)\n", m.Namespace, m.Name, m.Images, m.ReadyReplicas, m.Replicas)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "Print only the plugin's version; do not ask the cluster.")
	output.AddFlag(cmd)
	return cmd
}

// findInstalled lists kubext's manager Deployments in every namespace the
// user may list. An error is reported, not returned: the plugin's own
// version is still worth printing.
func findInstalled(ctx context.Context, env *Env) ([]installed, string) {
	c, err := env.Client()
	if err != nil {
		return nil, err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list := &appsv1.DeploymentList{}
	if err := c.List(ctx, list, managerSelector); err != nil {
		return nil, fmt.Sprintf("listing Deployments: %v", err)
	}
	var out []installed
	for _, d := range list.Items {
		m := installed{Namespace: d.Namespace, Name: d.Name, ReadyReplicas: d.Status.ReadyReplicas, Replicas: d.Status.Replicas}
		for _, c := range d.Spec.Template.Spec.Containers {
			m.Images = append(m.Images, c.Image)
		}
		out = append(out, m)
	}
	return out, ""
}
