// Package plugin holds what every command of the kubectl-kubext plugin
// shares: the kubectl connection flags, the output streams and a client that
// knows kubext's API types. Each command group (ip, ...) lives in its own
// subpackage and is added to the root command by cmd/kubectl-kubext.
package plugin

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// Scheme knows the built-in Kubernetes types and kubext's API types.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(ipv1.AddToScheme(Scheme))
	utilruntime.Must(rebootv1.AddToScheme(Scheme))
}

// Env is what every command needs: the kubectl flags that say which cluster
// to talk to, the streams to write to, and the clock.
type Env struct {
	genericiooptions.IOStreams
	// ConfigFlags are kubectl's --kubeconfig, --context, --namespace, ...
	ConfigFlags *genericclioptions.ConfigFlags
	// Now is time.Now; tests may fix it.
	Now func() time.Time
}

// NewEnv returns an Env writing to streams, with kubectl's connection flags
// not yet bound to a command (NewRootCommand binds them).
func NewEnv(streams genericiooptions.IOStreams) *Env {
	return &Env{
		IOStreams:   streams,
		ConfigFlags: genericclioptions.NewConfigFlags(true).WithWarningPrinter(streams),
		Now:         time.Now,
	}
}

// Client returns a client for the cluster the flags select. It reads from
// the API server directly: a command runs once, a cache would only delay it.
func (e *Env) Client() (client.WithWatch, error) {
	cfg, err := e.ConfigFlags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	return c, nil
}

// Namespace is the namespace of --namespace or of the current kubeconfig
// context, for arguments that name a pod without its namespace.
func (e *Env) Namespace() (string, error) {
	ns, _, err := e.ConfigFlags.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

// NewRootCommand returns the `kubectl kubext` command with kubectl's
// connection flags; the caller adds the command groups with AddCommand.
func NewRootCommand(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kubectl-kubext",
		Short: "Inspect and operate kubext: static IPs and more",
		Long: `kubectl kubext inspects and operates the kubext operators from kubectl.

Install the kubectl-kubext binary anywhere on your PATH and kubectl finds it
as the "kubext" plugin. It uses your kubeconfig like kubectl does.`,
		Example: `  # List the static IPs, where each is attached and who stands by
  kubectl kubext ip list

  # Explain why an IP is (or is not) where it is
  kubectl kubext ip explain web`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl kubext"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// kubectl completes plugins through a kubectl_complete-kubext script
	// calling the hidden __complete command; a completion command would
	// only confuse.
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.SetIn(env.In)
	cmd.SetOut(env.Out)
	cmd.SetErr(env.ErrOut)
	env.ConfigFlags.AddFlags(cmd.PersistentFlags())
	return cmd
}
