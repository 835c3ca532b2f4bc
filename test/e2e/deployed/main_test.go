// Package deployed runs kubext's scenarios against kubext as a user
// deploys it: installed from its rendered manifest with server-side apply,
// with the manager replicas, ip-agents and reboot-agents of that install
// run by the lab as processes under the pods' own service accounts (see
// lab.Install). A missing RBAC rule, a wrong flag in a manifest or a policy
// that blocks its own agent fails these tests.
//
// It brings up a lab of its own rather than sharing test/e2e's: the
// scenarios there start their own managers and agents, which would compete
// with the deployed ones for the leader Lease and the nodes' heartbeats.
package deployed

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

var (
	theLab   *lab.Lab
	deployed *lab.Deployed
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		// Deployed mode needs network, mount and PID namespaces; every
		// test skips saying so (needRoot).
		fmt.Println("deployed: not root, so deployed mode cannot run; its tests skip")
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	var err error
	theLab, err = lab.Up(ctx, lab.Options{
		Name:    "e2e-deployed",
		Prefix:  "kxd",
		Subnet:  netip.MustParsePrefix("203.0.113.0/24"),
		Nodes:   3,
		Network: true,
		// As a hardened cluster: kubext's namespace must say what its
		// agents need.
		PodSecurity: "baseline",
		Log:         func(f string, a ...any) { fmt.Printf("lab: "+f+"\n", a...) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "deployed: bringing the lab up:", err)
		return 1
	}
	defer func() {
		if err := theLab.Down(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "deployed: removing the lab:", err)
		}
	}()
	// The manifest a user would apply: KUBEXT_INSTALL_MANIFEST (e.g.
	// dist/install.yaml from `make build-installer`), or config/default
	// rendered by kubectl kustomize.
	deployed, err = theLab.Install(ctx, lab.InstallOptions{Manifest: os.Getenv("KUBEXT_INSTALL_MANIFEST")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "deployed: installing kubext:", err)
		return 1
	}
	fmt.Printf("deployed: lab up and kubext installed in %s\n", time.Since(start).Round(100*time.Millisecond))
	code := m.Run()
	if code != 0 {
		// Down removes the lab's directory: keep the pods' logs.
		keep := filepath.Join(os.TempDir(), "kubext-e2e-deployed-logs")
		_ = os.RemoveAll(keep)
		if err := os.CopyFS(keep, os.DirFS(filepath.Join(theLab.Dir, "logs"))); err == nil {
			fmt.Println("deployed: the lab's logs are kept in", keep)
		}
	}
	return code
}

// needRoot skips a test when the lab could not run kubext deployed.
func needRoot(t *testing.T) {
	t.Helper()
	if deployed == nil {
		t.Skip("needs root: deployed mode runs kubext's pods in network, mount and PID namespaces")
	}
}
