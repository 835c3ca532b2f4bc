package chart

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestChartCopiesMatchConfig checks the chart's copies of config/ (CRDs in
// crds/, RBAC rules, policies, webhooks, alert rules and dashboard under
// files/config/) are byte for byte the files of config/, and that no CRD,
// per-kind role or policy of config/ is missing from the chart.
func TestChartCopiesMatchConfig(t *testing.T) {
	dir := root(t)
	fix := "; run `make chart-sync` and commit"

	// CRDs: the same set of files, the same bytes.
	want := files(t, filepath.Join(dir, "config/crd/bases"))
	got := files(t, filepath.Join(dir, "charts/kubext/crds"))
	if strings.Join(want, " ") != strings.Join(got, " ") {
		t.Errorf("charts/kubext/crds has %v, config/crd/bases has %v%s", got, want, fix)
	}
	for _, f := range want {
		same(t, filepath.Join(dir, "config/crd/bases", f), filepath.Join(dir, "charts/kubext/crds", f), fix)
	}

	// Every copy under files/config is its config/ file.
	copies := filepath.Join(dir, "charts/kubext/files/config")
	err := filepath.WalkDir(copies, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(copies, path)
		same(t, filepath.Join(dir, "config", rel), path, fix)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Files the chart must carry: per-kind roles and policies come and go
	// with the APIs.
	for _, pattern := range []string{"rbac/*_editor_role.yaml", "rbac/*_viewer_role.yaml", "policy/*.yaml",
		"rbac/role.yaml", "ip-agent/rbac.yaml", "reboot-agent/rbac.yaml", "webhook/manifests.yaml",
		"prometheus/rules.yaml", "prometheus/dashboard.json"} {
		matches, _ := filepath.Glob(filepath.Join(dir, "config", pattern))
		if len(matches) == 0 {
			t.Errorf("config/%s matches nothing", pattern)
		}
		for _, m := range matches {
			if b := filepath.Base(m); b == "kustomization.yaml" || b == "kustomizeconfig.yaml" {
				continue // kustomize's own
			}
			rel, _ := filepath.Rel(filepath.Join(dir, "config"), m)
			if _, err := os.Stat(filepath.Join(copies, rel)); err != nil {
				t.Errorf("config/%s has no copy in charts/kubext/files/config%s", rel, fix)
			}
		}
	}
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

func same(t *testing.T, source, dest, fix string) {
	t.Helper()
	a, err := os.ReadFile(source)
	if err != nil {
		t.Errorf("%s: its source is gone (%v)%s", dest, err, fix)
		return
	}
	b, err := os.ReadFile(dest)
	if err != nil {
		t.Errorf("%v%s", err, fix)
		return
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s differs from %s%s", dest, source, fix)
	}
}
