// Command demo is `make demo`: it brings up the lab, runs the manager (and,
// as operators arrive, their node agents) and walks through each operator's
// scenario, printing what happens. It removes the lab at the end unless
// DEMO_KEEP=1.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kubext/kubext/test/lab"
)

// demo is what every scenario gets: the lab and the manager's addresses.
type demo struct {
	lab        *lab.Lab
	root       string
	metricsURL string
}

// scenario is one operator's walk-through.
type scenario struct {
	title string
	run   func(ctx context.Context, d *demo) error
}

var scenarios = []scenario{
	{"The lab: a real control plane with simulated nodes", labScenario},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) { fmt.Printf("    "+format+"\n", args...) }

func step(format string, args ...any) { fmt.Printf("\n==> "+format+"\n", args...) }

func run(ctx context.Context) (err error) {
	root, err := lab.RepoRoot()
	if err != nil {
		return err
	}
	d := &demo{root: root}
	step("Bringing up the lab")
	network := os.Geteuid() == 0
	if !network {
		say("(not root: the lab runs without its network namespaces)")
	}
	d.lab, err = lab.Up(ctx, lab.Options{
		Name:    "demo",
		Prefix:  "kxd",
		Network: network,
		CRDDirs: []string{filepath.Join(root, "config", "crd", "bases")},
		Log:     say,
	})
	if err != nil {
		return err
	}
	defer func() {
		if os.Getenv("DEMO_KEEP") == "1" && err == nil {
			step("Leaving the lab up (DEMO_KEEP=1); remove it with: bin/lab down --name demo")
			say("export KUBECONFIG=%s", d.lab.Kubeconfig)
			return
		}
		step("Removing the lab")
		if derr := d.lab.Down(context.WithoutCancel(ctx)); derr != nil && err == nil {
			err = derr
		}
		say("Done")
	}()

	if err := d.startManager(ctx); err != nil {
		return err
	}
	for i, s := range scenarios {
		step("Scenario %d/%d: %s", i+1, len(scenarios), s.title)
		if err := s.run(ctx, d); err != nil {
			return fmt.Errorf("%s: %w", s.title, err)
		}
	}
	return nil
}

// startManager runs bin/manager against the lab with leader election, the
// way it runs in a cluster, and waits until it reports ready.
func (d *demo) startManager(ctx context.Context) error {
	step("Starting the manager (all controllers, leader election on)")
	metrics, probes, err := freeAddr(), freeAddr(), error(nil)
	if metrics == "" || probes == "" {
		return fmt.Errorf("no free port on 127.0.0.1")
	}
	p, err := d.lab.Start("manager", "", filepath.Join(d.root, "bin", "manager"), []string{
		"--kubeconfig", d.lab.Kubeconfig, "--leader-elect", "--leader-election-namespace", "kube-system",
		"--metrics-bind-address", metrics, "--health-probe-bind-address", probes,
	})
	if err != nil {
		return err
	}
	d.metricsURL = "http://" + metrics + "/metrics"
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + probes + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if !p.Running() {
			return fmt.Errorf("the manager exited; see %s", p.Log)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the manager did not become ready; see %s", p.Log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	say("Manager ready: probes on %s, metrics on %s, log in %s", probes, d.metricsURL, p.Log)
	return nil
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return ""
	}
	defer l.Close()
	return l.Addr().String()
}
