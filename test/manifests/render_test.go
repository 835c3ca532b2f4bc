package manifests

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
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/kubext/kubext/test/lab"
)

// repo is the repository root.
func repo(t *testing.T) string {
	t.Helper()
	dir, err := lab.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// configDefault renders config/default in process, as `kubectl
// kustomize config/default` does (same kustomize API, default options).
func configDefault(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(repo(t), "config", "default"))
	if err != nil {
		t.Fatalf("kustomize config/default: %v", err)
	}
	data, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, data)
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
	args := []string{"template", "kubext", "charts/kubext", "--namespace", "kubext-system"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helm, args...)
	cmd.Dir = repo(t)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %v: %w: %s", args, err, stderr.String())
	}
	return decode(t, stdout.Bytes()), nil
}

// decode splits a YAML stream into objects.
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
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}
