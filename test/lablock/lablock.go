// Package lablock is the machine-wide lock of everything that brings a lab
// or a lab network up: network namespaces, the documentation subnets and
// kwokctl's ports are global to the machine, so two of them at once break
// each other. `make test`, `make demo` and the benchmarks take the same
// lock with `flock -o /tmp/kubext-e2e.lock`; tests that are not run under
// it (test/lab/labnet's, test/chart's lab test) take it themselves.
package lablock

import (
	"fmt"
	"os"
	"syscall"
)

// Path is the lock file.
const Path = "/tmp/kubext-e2e.lock"

// Lock waits for the lock and returns its release. Never call it from a
// process that runs under flock(1) of the same file: it would wait for its
// own parent.
func Lock() (unlock func(), err error) {
	f, err := os.OpenFile(Path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("lab lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lab lock %s: %w", Path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
