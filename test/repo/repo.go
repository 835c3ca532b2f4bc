// Package repo finds the kubext checkout and names the Kubernetes version
// its tools are built at, for tests of every tier: it imports nothing of
// the lab, so envtest binaries do not link the lab's netlink code.
package repo

import (
	"errors"
	"os"
	"path/filepath"
)

// KubeVersion is the Kubernetes version of the control-plane binaries under
// bin/k8s-<version> (hack/tools/k8s) that the lab and envtest run.
const KubeVersion = "v1.36.3"

// Root finds the root of the kubext repository from the working directory,
// so that tests run from any package find bin/ and config/.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && isKubext(data) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the kubext repository (no go.mod of github.com/kubext/kubext found)")
		}
		dir = parent
	}
}

func isKubext(gomod []byte) bool {
	const want = "module github.com/kubext/kubext\n"
	return len(gomod) >= len(want) && string(gomod[:len(want)]) == want
}
