package plugin

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// completionTimeout bounds the API call behind one completion: a shell
// waiting on an unreachable cluster is worse than no suggestion.
const completionTimeout = 3 * time.Second

// Names lists the names a completion suggests.
type Names func(ctx context.Context, c client.Reader) ([]string, error)

// CompleteNames returns a ValidArgsFunction suggesting the names list
// returns for the first argument (or every argument, when repeat is set),
// never one already given. Errors suggest nothing rather than break the
// shell's completion.
func CompleteNames(env *Env, repeat bool, list Names) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 && !repeat {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := env.Client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		names, err := list(ctx, c)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, n := range names {
			if strings.HasPrefix(n, toComplete) && !slices.Contains(args, n) {
				out = append(out, n)
			}
		}
		slices.Sort(out)
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// ListNames returns a Names that lists list's items with client.List and
// takes name from each. Cluster-scoped kinds ignore the namespace.
func ListNames[L client.ObjectList](newList func() L, names func(L) []string) Names {
	return func(ctx context.Context, c client.Reader) ([]string, error) {
		l := newList()
		if err := c.List(ctx, l); err != nil {
			return nil, err
		}
		return names(l), nil
	}
}
