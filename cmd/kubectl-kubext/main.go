// Command kubectl-kubext is the kubectl plugin for kubext: on the PATH, it
// runs as `kubectl kubext`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubext/kubext/internal/plugin"
	"github.com/kubext/kubext/internal/plugin/ipcmd"
	"github.com/kubext/kubext/internal/plugin/rebootcmd"
)

func main() {
	// The plugin reports errors itself; controller-runtime's client has
	// nothing to log to a person.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// newRootCommand wires the command groups under `kubectl kubext`.
func newRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	env := plugin.NewEnv(streams)
	root := plugin.NewRootCommand(env)
	root.AddCommand(ipcmd.NewCommand(env), rebootcmd.NewCommand(env), plugin.NewVersionCommand(env))
	return root
}
