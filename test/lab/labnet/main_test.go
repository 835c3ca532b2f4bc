package labnet

import (
	"fmt"
	"os"
	"testing"

	"github.com/kubext/kubext/test/lablock"
)

// TestMain holds the machine-wide lab lock while the tests run as root:
// they create namespaces and routes in the documentation subnets that a
// lab brought up by another test binary, a benchmark or `make demo` uses
// too (`make test` runs this package beside others, not under the lock).
func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		unlock, err := lablock.Lock()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		code := m.Run()
		unlock()
		os.Exit(code)
	}
	os.Exit(m.Run())
}
