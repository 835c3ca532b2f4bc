package repo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRootFindsTheCheckout(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "test", "repo", "repo.go")); err != nil {
		t.Fatalf("Root() = %s, which does not hold this package: %v", root, err)
	}
}

// A nested module (hack/tools/k8s has its own go.mod) is not the root.
func TestRootSkipsANestedModule(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "tools")
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for path, mod := range map[string]string{dir: "github.com/kubext/kubext", sub: "example.com/tools"} {
		if err := os.WriteFile(filepath.Join(path, "go.mod"), []byte("module "+mod+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(sub)
	if root, err := Root(); err != nil || root != dir {
		t.Fatalf("Root() = %s, %v; want %s", root, err, dir)
	}
}
