// Command demo is `make demo`: it brings up the lab, runs the manager (and,
// as operators arrive, their node agents) and walks through each operator's
// scenario, printing what happens. It removes the lab at the end unless
// DEMO_KEEP=1.
package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/staticip"
)

// demo is what every scenario gets: the lab and the manager's addresses.
type demo struct {
	lab        *lab.Lab
	root       string
	metricsURL string
	// deployed is kubext installed from the installer, its pods (manager
	// replicas, ip-agents, reboot-agents) run by the lab; nil when the
	// demo runs without root, with the manager and agents as processes.
	deployed *lab.Deployed
	// manager is the manager process when not deployed, and ipAgents
	// says whether the demo started the ip-agents' processes.
	manager  *lab.Manager
	ipAgents bool
}

// scenario is one operator's walk-through.
type scenario struct {
	title string
	run   func(ctx context.Context, d *demo) error
}

var scenarios = []scenario{
	{"The lab: a real control plane with simulated nodes", labScenario},
	{"Static IP: one fixed address for a partner, in and out, moved in seconds on node failure", staticIPScenario},
	{"Static IP on AWS: a BYOIP address moved between nodes' network interfaces by EC2, on the lab's VPC model", awsScenario},
	{"CronTab: the Kubernetes docs' example CRD, reconciled into a CronJob", crontabScenario},
	{"Redis: a replicated Redis as a StatefulSet, scaled with the seed's kubectl patch, healed after a hand edit", redisScenario},
	{"PulsarConsumer: a topic's consumers as a Deployment, scaled with kubectl scale, healed after a hand edit", pulsarScenario},
	{"Reboot: rolling node reboots asked for from kubectl and by the node, never more than maxUnavailable down", rebootScenario},
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
	// `kubectl kubext` is the plugin in bin/, found on PATH as kubectl finds
	// plugins.
	if err := os.Setenv("PATH", filepath.Join(root, "bin")+string(os.PathListSeparator)+os.Getenv("PATH")); err != nil {
		return err
	}
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
		if err != nil {
			// Down removes the lab's directory: keep the components' logs.
			keep := filepath.Join(os.TempDir(), "kubext-demo-logs")
			_ = os.RemoveAll(keep)
			d.dumpState(context.WithoutCancel(ctx))
			if cerr := os.CopyFS(keep, os.DirFS(filepath.Join(d.lab.Dir, "logs"))); cerr == nil {
				say("The lab's logs (manager, agents, pods) are kept in %s", keep)
			}
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
	// DEMO_ONLY=word runs only the scenarios whose title contains it.
	run := scenarios
	if only := strings.ToLower(os.Getenv("DEMO_ONLY")); only != "" {
		run = slices.DeleteFunc(slices.Clone(scenarios), func(s scenario) bool {
			return !strings.Contains(strings.ToLower(s.title), only)
		})
	}
	for i, s := range run {
		step("Scenario %d/%d: %s", i+1, len(run), s.title)
		// The scenario before may have rebooted or killed a node that ran
		// a manager replica.
		if err := d.webhooksServe(ctx); err != nil {
			return err
		}
		if err := s.run(ctx, d); err != nil {
			return fmt.Errorf("%s: %w", s.title, err)
		}
	}
	return nil
}

// startManager installs kubext as a user would: server-side apply of the
// installer (DEMO_MANIFEST, dist/install.yaml from `make
// build-installer`), whose pods the lab then runs under their own
// ServiceAccounts. Without root (no namespaces to run pods in) it runs the
// manager as a local process instead.
func (d *demo) startManager(ctx context.Context) error {
	if manifest := os.Getenv("DEMO_MANIFEST"); manifest != "" && d.lab.Net != nil {
		step("Installing kubext: kubectl apply --server-side -f %s", manifest)
		var err error
		if d.deployed, err = d.lab.Install(ctx, lab.InstallOptions{Manifest: manifest}); err != nil {
			return err
		}
		say("Installed into %s; the lab runs its pods (the manager's replicas and one ip-agent and reboot-agent per node)", d.deployed.Namespace)
		say("as processes with the pods' own command, arguments, environment and ServiceAccount tokens")
		if out, err := d.lab.Kubectl(ctx, "get", "pods", "-n", d.deployed.Namespace, "-o", "wide"); err == nil {
			fmt.Print(indent(string(out)))
		}
		return nil
	}
	step("Starting the manager (all controllers, leader election on)")
	m, err := d.lab.StartManager(ctx, "manager")
	if err != nil {
		return err
	}
	d.metricsURL, d.manager = m.MetricsURL, m
	say("Manager ready: metrics on %s, log in %s", d.metricsURL, m.Log)
	return nil
}

// managerBack starts the manager again if it left (it does when it cannot
// renew its leader Lease, e.g. while the demo freezes the API server), as
// the kubelet would; installed, the lab restarts it, and this waits until
// every pod of the install passes its probes again.
func (d *demo) managerBack(ctx context.Context) error {
	if d.deployed != nil {
		return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			failed, err := d.deployed.Probe(ctx)
			return err == nil && len(failed) == 0, nil
		})
	}
	if d.manager == nil || d.manager.Running() {
		return nil
	}
	say("(the manager lost its leader Lease during the freeze and left; starting it again, as the kubelet would)")
	m, err := d.lab.StartManager(ctx, "manager-2")
	if err != nil {
		return err
	}
	d.metricsURL, d.manager = m.MetricsURL, m
	return nil
}

// webhooksServe waits until the installed manager serves its admission
// webhooks from every replica. kwok marks pods Ready without running their
// readiness probes, and the lab restarts a node's pods only after the node
// is back: after a rollout, or a node the demo rebooted or killed, the
// webhook Service may list a replica that does not listen yet (the API
// server picks any). So: every replica passes its probes (managerBack; the
// readiness probe includes the webhook server), every address of the
// Service's EndpointSlices accepts connections, and a server-side dry run
// goes through the webhook. Local mode (no install) has nothing to wait for.
func (d *demo) webhooksServe(ctx context.Context) error {
	if d.deployed == nil {
		return nil
	}
	if err := d.managerBack(ctx); err != nil {
		return fmt.Errorf("the manager does not pass its probes: %w", err)
	}
	probe := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe"},
		Spec: ipv1.IPPoolSpec{Addresses: []string{netip.PrefixFrom(staticip.Nth(d.lab.Net.Subnet, 200), 32).String()}}}
	c, err := staticip.NewClient(d.lab)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if last = webhookEndpointsServe(ctx, c, d.deployed.Namespace, webhookService); last == nil {
			last = c.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		}
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the manager does not serve its webhooks: %w (last: %v)", err, last)
	}
	return nil
}

// webhookService is the Service the admission webhooks are called through
// (config/webhook/service.yaml with the install's name prefix).
const webhookService = "kubext-webhook-service"

// webhookEndpointsServe says why not every address the Service's
// EndpointSlices list accepts a TCP connection on its port (nil when all
// do, and there is at least one).
func webhookEndpointsServe(ctx context.Context, c client.Client, ns, service string) error {
	var slices discoveryv1.EndpointSliceList
	if err := c.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: service}); err != nil {
		return err
	}
	n := 0
	for _, s := range slices.Items {
		for _, p := range s.Ports {
			if p.Port == nil {
				continue
			}
			for _, e := range s.Endpoints {
				for _, a := range e.Addresses {
					addr := net.JoinHostPort(a, strconv.Itoa(int(*p.Port)))
					conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
					if err != nil {
						return fmt.Errorf("webhook endpoint %s: %w", addr, err)
					}
					_ = conn.Close()
					n++
				}
			}
		}
	}
	if n == 0 {
		return fmt.Errorf("service %s/%s has no endpoints yet", ns, service)
	}
	return nil
}

// dumpState writes what the API server holds of the static IPs and the
// agents' heartbeats into the lab's logs, so that a failed run can be read
// afterwards: who renewed last, in which generation, declared what.
func (d *demo) dumpState(ctx context.Context) {
	for file, args := range map[string][]string{
		"state-leases.yaml": {"get", "leases", "-A", "-o", "yaml"},
		"state-ips.yaml":    {"get", "ips,ippools", "-o", "yaml"},
		"state-pods.txt":    {"get", "pods", "-A", "-o", "wide"},
		// The pods' Ready conditions (the READY column counts containers).
		"state-pods.yaml":   {"get", "pods", "-A", "-o", "yaml"},
		"state-nodes.yaml":  {"get", "nodes", "-o", "yaml"},
		"state-reboot.yaml": {"get", "rebootgroups", "-o", "yaml"},
		"state-pdbs.txt":    {"get", "pdb", "-A", "-o", "wide"},
		"state-events.txt":  {"get", "events", "-A", "--sort-by", ".lastTimestamp"},
	} {
		out, err := d.lab.Kubectl(ctx, args...)
		if err != nil {
			out = append(out, []byte("\n"+err.Error()+"\n")...)
		}
		_ = os.WriteFile(filepath.Join(d.lab.Dir, "logs", file), out, 0o644)
	}
}
