// Package testenv starts an envtest control plane (kube-apiserver and etcd)
// from the binaries `make tools` builds, with kubext's CRDs installed. Each
// controller package starts one in its TestMain.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubext/kubext/test/lab"
)

// Env is a running envtest control plane.
type Env struct {
	*envtest.Environment
	Config *rest.Config
}

// Start starts kube-apiserver and etcd and installs the CRDs in
// config/crd/bases. It fails with a clear message when the binaries have
// not been built.
func Start() (*Env, error) {
	root, err := lab.RepoRoot()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(root, "bin", "k8s-"+lab.KubeVersion)
	if os.Getenv("TEST_ASSET_KUBE_APISERVER") == "" {
		if _, err := os.Stat(filepath.Join(bin, "kube-apiserver")); err != nil {
			return nil, fmt.Errorf("kube-apiserver not found in %s: run `make tools` (or `make test`)", bin)
		}
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	return &Env{Environment: env, Config: cfg}, nil
}
