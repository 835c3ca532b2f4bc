// Package render turns kubext's manifests into objects the way users
// apply them — config/default through kustomize, charts/kubext through
// helm — for the tests that check what an install would create
// (test/chart, test/manifests).
package render

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/kubext/kubext/test/lab"
)

// Root is the repository root; not finding it fails the test.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := lab.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// Decode splits a multi-document YAML (or JSON) stream into objects,
// skipping empty documents.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decoding rendered YAML: %w", err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// Kustomize renders a kustomization directory of the repository (e.g.
// config/default) in process, as `kubectl kustomize` does (the same
// kustomize API, default options).
func Kustomize(root, dir string) ([]*unstructured.Unstructured, error) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(root, dir))
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	data, err := res.AsYaml()
	if err != nil {
		return nil, err
	}
	return Decode(data)
}

// Run runs a program in the repository root and returns its standard
// output; an error carries what it printed.
func Run(root, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %v: %w\n%s%s", filepath.Base(name), args, err, stderr.String(), stdout.String())
	}
	return stdout.Bytes(), nil
}

// Helm runs `helm template` with args (release, chart, flags) in the
// repository root and decodes what it renders.
func Helm(root, helm string, args ...string) ([]*unstructured.Unstructured, error) {
	out, err := Run(root, helm, append([]string{"template"}, args...)...)
	if err != nil {
		return nil, err
	}
	return Decode(out)
}
