package chart

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/render"
)

const (
	// The release and namespace that make the chart's names those of
	// config/default (namePrefix kubext-, namespace kubext-system).
	release   = "kubext"
	namespace = "kubext-system"
)

// root is the repository root.
func root(t *testing.T) string { return render.Root(t) }

// tool is a binary under bin/; missing, the test fails saying how to build
// it (never skips: `make test` builds it first).
func tool(t *testing.T, rel, how string) string {
	t.Helper()
	p := filepath.Join(root(t), "bin", rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: %s", p, how)
	}
	return p
}

func helmBin(t *testing.T) string {
	return tool(t, "helm", "run `make helm` (or `make test-chart`)")
}

func kubectlBin(t *testing.T) string {
	return tool(t, filepath.Join("k8s-"+lab.KubeVersion, "kubectl"), "run `make tools`")
}

// run runs a command in the repository root and returns its stdout; a
// failure fails the test with stderr.
func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, err := tryRun(t, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func tryRun(t *testing.T, name string, args ...string) ([]byte, error) {
	t.Helper()
	return render.Run(root(t), name, args...)
}

// helmTemplate renders the chart as release "kubext" in kubext-system, CRDs
// included, with extra helm arguments (e.g. --set).
func helmTemplate(t *testing.T, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	args := append([]string{"template", release, "charts/kubext", "--namespace", namespace, "--include-crds"}, extra...)
	return decode(t, run(t, helmBin(t), args...))
}

// kustomizeDefault renders config/default as `make deploy` applies it.
func kustomizeDefault(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	return decode(t, run(t, kubectlBin(t), "kustomize", "config/default"))
}

// decode splits a multi-document YAML stream into objects.
func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
