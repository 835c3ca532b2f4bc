package version

import (
	"flag"
	"fmt"
	"io"
)

// Parse adds --version to fs and parses args with it. With --version it
// prints this binary's build to w and reports true, before the binary
// checks any other flag: a version query needs no node name, cluster or
// broker.
func Parse(fs *flag.FlagSet, args []string, w io.Writer) (printed bool, err error) {
	show := fs.Bool("version", false, "Print the version and exit.")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	if *show {
		fmt.Fprintln(w, Get())
	}
	return *show, nil
}
