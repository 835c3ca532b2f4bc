// Command ip-agent runs on every node (a DaemonSet; a local process per
// simulated node in the lab). It renews the node's heartbeat Lease and
// makes the node answer for exactly the static IPs placed on it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/agentkube"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/internal/ipagent"
	"github.com/kubext/kubext/internal/netconf"
	"github.com/kubext/kubext/internal/version"
	"github.com/kubext/kubext/internal/witnessrun"
)

// expiryMargin covers the kernel's lag in removing an expired address (its
// lifetime check runs on a timer with up to a quarter second of slack) and
// scheduling, so that a frozen agent's node is silent before the
// controller may confirm the agent lost.
const expiryMargin = 500 * time.Millisecond

// minLeaseDuration is the shortest lease that leaves a whole second of
// address lifetime after expiryMargin.
const minLeaseDuration = 2 * time.Second

// gcPercent is the ip-agent's GOGC unless the environment sets one. The
// agent runs on every node and allocates little: its live heap is a few
// MiB, and Go's default (100) lets the heap grow to twice that between
// collections, which on the nodes that hold addresses was 3.5-4 MiB of
// its peak (docs/benchmarks.md, "The real ip-agent's memory"). Collecting
// twice as often costs a busy-ish agent a fraction of a millisecond a
// second.
const gcPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if err := run(signals.SetupSignalHandler(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ip-agent:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ip-agent", flag.ContinueOnError)
	config.RegisterFlags(fs)
	var (
		node, namespace, iface, excludeSNAT, metricsAddr, probeAddr, pprofAddr string
		leaseDuration, renewInterval, resync                                   time.Duration
	)
	fs.StringVar(&node, "node-name", os.Getenv("NODE_NAME"), "Name of this node (default $NODE_NAME).")
	fs.StringVar(&namespace, "heartbeat-namespace", "kubext-system", "Namespace of the heartbeat Lease.")
	fs.DurationVar(&leaseDuration, "lease-duration", 2*time.Second,
		"Heartbeat lease duration (whole seconds): how long the controller waits before moving this node's IPs elsewhere.")
	fs.DurationVar(&renewInterval, "renew-interval", 500*time.Millisecond, "How often the heartbeat is renewed.")
	fs.StringVar(&iface, "interface", "", "Uplink interface for the static IPs (default: the interface routing to each address).")
	fs.StringVar(&excludeSNAT, "exclude-snat", "", "Comma-separated CIDRs that a static IP's holder pod reaches with its own address: "+
		"the cluster's pod and service CIDRs (required; \"none\" sends all its traffic, in-cluster DNS included, out of the uplink as the static IP).")
	fs.DurationVar(&resync, "resync", 10*time.Second, "How often the node is re-checked for drift.")
	var wf witnessrun.Config
	wf.BindFlags(fs)
	fs.StringVar(&metricsAddr, "metrics-bind-address", "0", "Metrics address (0 = off).")
	fs.StringVar(&probeAddr, "health-probe-bind-address", ":8082", "Probe address (/healthz, /readyz).")
	fs.StringVar(&pprofAddr, "pprof-bind-address", "0", "Go profiling address (/debug/pprof; 0 = off). Bind it to 127.0.0.1: profiles show what the agent does.")
	skipPolicyCheck := fs.Bool(policyCheckFlag, false, "UNSAFE: start even when the admission policy that confines this agent to its own node "+
		"(config/policy/ip-agent.yaml) is not in force, e.g. on a cluster without ValidatingAdmissionPolicy. Without it the agent can rewrite any IP's status and any Lease of its namespace.")
	opts := zap.Options{Development: true}
	opts.BindFlags(fs)
	if printed, err := version.Parse(fs, args, os.Stdout); err != nil || printed {
		return err
	}
	if err := witnessrun.SetAllowFromDefault(fs); err != nil {
		return err
	}
	log := zap.New(zap.UseFlagOptions(&opts)).WithValues("node", node)
	ctx = logr.NewContext(ctx, log)
	if node == "" {
		return errors.New("--node-name or $NODE_NAME is required")
	}
	if leaseDuration < minLeaseDuration {
		return fmt.Errorf("--lease-duration %s is shorter than %s: the kernel keeps an expired address up to a quarter second, and lifetimes are whole seconds, so a shorter lease leaves no lifetime that ends before the controller may move the address", leaseDuration, minLeaseDuration)
	}
	// Required: without the cluster's CIDRs the holder's DNS and Service
	// traffic would leave by the uplink, from the static IP.
	switch excludeSNAT {
	case "":
		return errors.New("--exclude-snat is required: set it to the cluster's pod and service CIDRs (e.g. 10.244.0.0/16,10.96.0.0/12), " +
			"or to \"none\" to send all of a holder pod's traffic, in-cluster DNS included, out of the uplink from its static IP")
	case "none":
		excludeSNAT = ""
	}
	var exclude []netip.Prefix
	for _, s := range strings.Split(excludeSNAT, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("--exclude-snat: %w", err)
		}
		exclude = append(exclude, p)
	}

	scheme, err := ipagent.Scheme()
	if err != nil {
		return err
	}
	cfg, err := config.GetConfig()
	if err != nil {
		return err
	}
	if err := checkPolicy(ctx, cfg, namespace, node, *skipPolicyCheck); err != nil {
		return err
	}
	if err := version.RegisterBuildInfo(agentkube.Registry); err != nil {
		return err
	}
	c, err := agentkube.New(cfg, scheme)
	if err != nil {
		return err
	}
	recorder := c.NewRecorder("ip-agent", log.WithName("events"))
	// The kernel drops the addresses and their NAT entries by itself unless
	// refreshed: the backstop for an agent killed or frozen before it could
	// fence. No lifetime written ends later than the last renewal's start
	// plus the lease duration, less expiryMargin: the controller confirms
	// the agent lost no earlier than one lease duration after it saw that
	// renewal, and by then the kernel has let go.
	var (
		hb    *heartbeat.Heartbeat
		agent *ipagent.Reconciler
		wit   *witnessrun.Run
	)
	dp, err := netconf.New(netconf.Options{
		ExcludeSNAT:     exclude,
		AddressLifetime: max(leaseDuration-time.Second, time.Second),
		// The coarse backstop: whole-second lifetimes, reaped up to
		// expiryMargin late, so that a killed agent's addresses go.
		// Lease holds end before the controller may move them, as ever;
		// witness holds a little after, since the gate below ends them.
		HoldDeadline: func() time.Time {
			leaseEnd := leaseHoldEnd(hb, leaseDuration)
			if wit == nil || agent == nil {
				return leaseEnd
			}
			return agent.HoldDeadline(leaseEnd, witnessBackstop)
		},
		// The hold gate: to the millisecond, the end of the Lease hold
		// or of what the witnesses vouched for, whichever comes first.
		GateDeadline: func() time.Time {
			leaseEnd := leaseHoldEnd(hb, leaseDuration)
			if wit == nil || agent == nil {
				return leaseEnd
			}
			return agent.HoldDeadline(leaseEnd, 0)
		},
		// A gate write that commits later than this after its deadline
		// was read closes the gate (a pause in between would carry the
		// hold past its end): half of what the witnesses' timing leaves
		// for the gate (fence slack), at most the default.
		GateLateLimit: min(max(wf.Timing.FenceSlack/2, time.Millisecond), 50*time.Millisecond),
		Log:           log.WithName("netconf"),
	})
	if err != nil {
		return err
	}
	// An agent that does not hold its heartbeat answers for nothing: what a
	// previous run left (it may have been killed before it could fence, and
	// the IPs may have moved since) goes before anything else, and nothing
	// is added until the heartbeat is held (OnRegained unfences).
	if err := dp.Fence(ctx); err != nil {
		return fmt.Errorf("removing what a previous run programmed: %w", err)
	}
	agent = &ipagent.Reconciler{
		Client:    c,
		Recorder:  recorder,
		Log:       log.WithName("ip-agent"),
		Node:      node,
		Dataplane: dp,
		Interface: iface,
		Resync:    resync,
	}
	if err := agent.Setup(); err != nil {
		return err
	}
	// The Lease requests are sent once each: the heartbeat and the
	// witness read-back have paces of their own (heartbeat.SendOnce).
	leaseREST, err := c.REST(coordinationv1.SchemeGroupVersion)
	if err != nil {
		return err
	}
	leases := heartbeat.SendOnce(leaseREST)
	g, ctx := errgroup.WithContext(ctx)
	if wf.Port != 0 {
		wit, err = witnessrun.New(ctx, wf, leases, namespace, node, agent, dp, func() { hb.Wake() }, log)
		if err != nil {
			return err
		}
		agent.Witness = &ipagent.WitnessConfig{Peer: wit.Peer(), Port: uint16(wf.Port), Nodes: c}
		g.Go(func() error { return wit.Start(ctx) })
	}
	// A node that no pool selects and no IP names renews nothing; when
	// that changes it renews at once, so that the controller can place
	// IPs here.
	duty, err := agent.NewDuty(func() { hb.Wake() })
	if err != nil {
		return err
	}
	hb, err = heartbeat.New(heartbeat.Config{
		Client:        leases,
		Namespace:     namespace,
		Component:     ipv1.AgentComponent,
		Node:          node,
		Duration:      leaseDuration,
		RenewInterval: renewInterval,
		OnLost:        agent.LeaseLost,
		OnRegained:    agent.Regained,
		OnRenewed: func() {
			// Fenced: the Lease was lost, or is not regained yet.
			switch err := dp.Refresh(); {
			case errors.Is(err, netconf.ErrLapsed):
				// Something expired while renewals stalled, or waited
				// for this renewal: put it back now.
				agent.Poke()
			case err != nil && !errors.Is(err, netconf.ErrFenced):
				log.Error(err, "Refreshing the lifetime of the node's static IPs")
			}
		},
		Needed:      duty.Needed,
		Annotations: wit.Annotations,
		// With the witness protocol on, a node that holds nothing on its
		// Lease renews it every idleRenew only.
		Idle:              wit.Idle(agent, duty),
		IdleDuration:      wf.IdleLease,
		IdleRenewInterval: wf.IdleRenew,
		Log:               log.WithName("heartbeat"),
	})
	if err != nil {
		return err
	}
	agent.Lease = hb
	log.Info("Starting ip-agent", "lease", heartbeat.LeaseName(ipv1.AgentComponent, node), "leaseDuration", leaseDuration)
	g.Go(func() error { return hb.Start(ctx) })
	g.Go(func() error { return duty.Start(ctx) })
	g.Go(func() error { return recorder.Run(ctx) })
	g.Go(func() error { return agentkube.ServeMetrics(ctx, metricsAddr) })
	g.Go(func() error { return agentkube.ServePprof(ctx, pprofAddr) })
	g.Go(func() error {
		return agentkube.ServeProbes(ctx, probeAddr,
			agentkube.Check{Name: "informers", Check: agent.Ready},
			agentkube.Check{Name: "heartbeat", Check: func() error {
				// A node with nothing to do holds nothing, and is ready.
				if !hb.Held() && duty.Needed() {
					return errors.New("heartbeat lease not held")
				}
				return nil
			}})
	})
	g.Go(func() error { return agent.Run(ctx) })
	err = g.Wait()
	// Leaving: remove what this node programmed so nothing answers for an
	// IP without an agent behind it. Fence rather than flush: a refresh
	// still under way must not put anything back.
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(err, dp.Fence(fctx))
}

// leaseHoldEnd is when the Lease hold ends, by the agent's clock: its last
// renewal's start plus the lease duration, less expiryMargin (zero before
// the first renewal).
func leaseHoldEnd(hb *heartbeat.Heartbeat, leaseDuration time.Duration) time.Time {
	if hb == nil || hb.LastRenewal().IsZero() {
		return time.Time{}
	}
	return hb.LastRenewal().Add(leaseDuration - expiryMargin)
}
