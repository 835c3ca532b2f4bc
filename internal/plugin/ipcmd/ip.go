// Package ipcmd is the `kubectl kubext ip` command group: list the static
// IPs, move one to a standby pod, and explain why an IP is where it is.
// The functions that turn objects into table rows and explanations are pure
// and tested without an API server.
package ipcmd

import (
	"github.com/spf13/cobra"

	"github.com/kubext/kubext/internal/plugin"
)

// NewCommand returns the `ip` command with its subcommands; run alone it
// lists the IPs, like `ip list`.
func NewCommand(env *plugin.Env) *cobra.Command {
	list := newListOptions(env)
	cmd := &cobra.Command{
		Use:   "ip",
		Short: "Static IPs: list, move to a standby, explain",
		Long: `Work with kubext's static IPs (ip.kubext.io IP objects): fixed addresses
that follow the pods claiming them with the annotation ip.kubext.io/ip.

Run alone, "kubectl kubext ip" lists the IPs like "kubectl kubext ip list".`,
		Example: `  # List the IPs (same as "kubectl kubext ip list")
  kubectl kubext ip

  # Why is IP "web" not Ready?
  kubectl kubext ip explain web

  # Hand IP "web" to its first standby before draining its node
  kubectl kubext ip move web`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return list.run(cmd.Context())
		},
	}
	list.addFlags(cmd)
	cmd.AddCommand(newListCommand(env), newMoveCommand(env), newExplainCommand(env))
	return cmd
}
