package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/kubext/kubext/test/lab"
)

const (
	// The release and namespace that make the chart's names those of
	// config/default (namePrefix kubext-, namespace kubext-system).
	release   = "kubext"
	namespace = "kubext-system"
)

// root is the repository root.
func root(t *testing.T) string {
	t.Helper()
	dir, err := lab.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

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
	cmd := exec.Command(name, args...)
	cmd.Dir = root(t)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %v: %w\n%s%s", filepath.Base(name), args, err, stderr.String(), stdout.String())
	}
	return stdout.Bytes(), nil
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
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decoding rendered YAML: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}
