// Package e2e holds kubext's scenarios on the lab: a real control plane
// with simulated nodes and, as root, a real network of namespaces. TestMain
// brings one lab up for the package and removes it afterwards.
package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kubext/kubext/test/lab"
)

// theLab is the lab every test of the package shares.
var theLab *lab.Lab

// rootOnly skips a test that needs the lab network when not root.
func rootOnly(t *testing.T) {
	t.Helper()
	if theLab.Net == nil {
		t.Skip("needs root: the lab network (network namespaces) was not built")
	}
}

func TestMain(m *testing.M) {
	os.Exit(runLab(m))
}

func runLab(m *testing.M) int {
	root, err := lab.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if os.Geteuid() != 0 {
		fmt.Println("e2e: not root, so the lab runs without its network; network tests skip")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	theLab, err = lab.Up(ctx, lab.Options{
		Name:    "e2e",
		Prefix:  "kxe",
		Subnet:  netip.MustParsePrefix("203.0.113.0/24"),
		Nodes:   3,
		Network: os.Geteuid() == 0,
		CRDDirs: []string{filepath.Join(root, "config", "crd", "bases")},
		Log:     func(f string, a ...any) { fmt.Printf("lab: "+f+"\n", a...) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: bringing the lab up:", err)
		return 1
	}
	fmt.Printf("e2e: lab up in %s\n", time.Since(start).Round(100*time.Millisecond))
	code := m.Run()
	if code != 0 {
		// Down removes the lab's directory: keep the components' logs.
		keep := filepath.Join(os.TempDir(), "kubext-e2e-logs")
		_ = os.RemoveAll(keep)
		if err := os.CopyFS(keep, os.DirFS(filepath.Join(theLab.Dir, "logs"))); err == nil {
			fmt.Println("e2e: the lab's logs are kept in", keep)
		}
	}
	if err := theLab.Down(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: removing the lab:", err)
		return 1
	}
	return code
}
