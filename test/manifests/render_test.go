package manifests

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubext/kubext/test/render"
)

// repo is the repository root.
func repo(t *testing.T) string { return render.Root(t) }

// configDefault renders config/default in process, as `kubectl
// kustomize config/default` does.
func configDefault(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render.Kustomize(repo(t), filepath.Join("config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// helmTemplate renders charts/kubext with bin/helm (built by `make helm`;
// helm's Go module lives in hack/tools/dev, not in the project's go.mod)
// and the given --set values; an error is returned as helm printed it.
func helmTemplate(t *testing.T, sets ...string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	helm := filepath.Join(repo(t), "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("%s is missing: run `make helm`", helm)
	}
	args := []string{"kubext", "charts/kubext", "--namespace", "kubext-system"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return render.Helm(repo(t), helm, args...)
}
