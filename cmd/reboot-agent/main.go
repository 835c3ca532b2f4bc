// Command reboot-agent runs on every node (a DaemonSet; a local process per
// simulated node in the lab). It asks for a reboot when the node's sentinel
// file appears, and reboots the node when the reboot controller orders it,
// once per boot.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/agentkube"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/internal/rebootagent"
	"github.com/kubext/kubext/internal/version"
)

func main() {
	if err := run(signals.SetupSignalHandler(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "reboot-agent:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("reboot-agent", flag.ContinueOnError)
	config.RegisterFlags(fs)
	a := &rebootagent.Agent{}
	var method, command, metricsAddr, probeAddr string
	fs.StringVar(&a.Node, "node-name", os.Getenv("NODE_NAME"), "Name of this node (default $NODE_NAME).")
	fs.StringVar(&a.SentinelFile, "sentinel-file", rebootagent.DefaultSentinelFile,
		`File whose presence asks for a reboot of the node ("" = none). A file older than the current boot is ignored: the reboot it asked for has happened.`)
	fs.DurationVar(&a.SentinelInterval, "sentinel-interval", rebootagent.DefaultSentinelInterval, "How often the sentinel file is looked for.")
	fs.StringVar(&method, "reboot-method", "command",
		"How to reboot: command (run --reboot-command) or signal (SIGRTMIN+5 to the host's systemd; needs hostPID and root, no tools in the image).")
	fs.StringVar(&command, "reboot-command", rebootagent.DefaultRebootCommand,
		"Command that reboots the machine, split on white space (no shell). The default needs hostPID, privileges and nsenter in the image.")
	fs.StringVar(&a.BootIDFile, "boot-id-file", rebootagent.DefaultBootIDFile,
		`File with the machine's current boot ID; an order is obeyed only if it matches too ("" = trust the Node's status alone).`)
	var hbNamespace string
	var hbDuration, hbInterval time.Duration
	fs.StringVar(&hbNamespace, "heartbeat-namespace", "",
		`Namespace of the agent's heartbeat Lease reboot-agent-<node>, which tells the reboot controller the agent is alive ("" = none; a controller that checks heartbeats then approves nothing on this node).`)
	fs.DurationVar(&hbDuration, "heartbeat-duration", rebootagent.DefaultHeartbeatDuration,
		"Lease duration of the heartbeat (whole seconds): how long the controller waits for a renewal before it approves nothing more on the node.")
	fs.DurationVar(&hbInterval, "heartbeat-interval", rebootagent.DefaultHeartbeatInterval, "How often the heartbeat is renewed.")
	var ledgerNamespace, ledgerName string
	fs.StringVar(&ledgerNamespace, "reboot-ledger-namespace", "",
		`Namespace of the reboot controller's approvals ledger (the manager's --heartbeat-namespace). An order is carried out only when the ledger records it (the approval, the order's time and the boot it ends, as the node shows them) ("" = trust the node's annotations alone).`)
	fs.StringVar(&ledgerName, "reboot-ledger-name", rebootv1.DefaultLedgerName, "Name of the approvals ledger ConfigMap (the manager's --reboot-ledger-name).")
	fs.StringVar(&metricsAddr, "metrics-bind-address", "0", "Metrics address (0 = off).")
	fs.StringVar(&probeAddr, "health-probe-bind-address", ":8083", "Probe address (/healthz, /readyz).")
	opts := zap.Options{Development: true}
	opts.BindFlags(fs)
	if printed, err := version.Parse(fs, args, os.Stdout); err != nil || printed {
		return err
	}
	log := zap.New(zap.UseFlagOptions(&opts)).WithValues("node", a.Node)
	ctx = logr.NewContext(ctx, log)
	if a.Node == "" {
		return errors.New("--node-name or $NODE_NAME is required")
	}
	switch method {
	case "command":
		c, err := rebootagent.ParseCommand(command)
		if err != nil {
			return fmt.Errorf("--reboot-command: %w", err)
		}
		a.Rebooter = c
	case "signal":
		a.Rebooter = rebootagent.Signal{PID: 1}
	default:
		return fmt.Errorf("--reboot-method must be command or signal, not %q", method)
	}
	if a.BootIDFile != "" {
		// Fail now rather than refuse every order later.
		if _, err := os.ReadFile(a.BootIDFile); err != nil {
			return fmt.Errorf("--boot-id-file: %w", err)
		}
	}
	if _, err := rebootagent.HostBootTime(); err == nil {
		a.BootTime = rebootagent.HostBootTime
	} else {
		log.Info("The machine's boot time is unknown, so a sentinel file left from before the boot cannot be told apart", "error", err.Error())
	}

	scheme, err := rebootagent.Scheme()
	if err != nil {
		return err
	}
	cfg, err := config.GetConfig()
	if err != nil {
		return err
	}
	if err := version.RegisterBuildInfo(agentkube.Registry); err != nil {
		return err
	}
	c, err := agentkube.New(cfg, scheme)
	if err != nil {
		return err
	}
	recorder := c.NewRecorder("reboot-agent", log.WithName("events"))
	a.Client, a.Recorder = c, recorder
	if ledgerNamespace != "" {
		a.Ledger = &rebootagent.Ledger{Reader: c, Namespace: ledgerNamespace, Name: ledgerName}
	}
	g, ctx := errgroup.WithContext(ctx)
	if hbNamespace != "" {
		leases, err := c.REST(coordinationv1.SchemeGroupVersion)
		if err != nil {
			return err
		}
		hb, err := heartbeat.New(heartbeat.Config{
			Client:        heartbeat.SendOnce(leases),
			Namespace:     hbNamespace,
			Component:     rebootagent.HeartbeatComponent,
			Node:          a.Node,
			Duration:      hbDuration,
			RenewInterval: hbInterval,
			Log:           log.WithName("heartbeat"),
		})
		if err != nil {
			return err
		}
		g.Go(func() error { return hb.Start(ctx) })
	}
	log.Info("Starting reboot-agent", "sentinel", a.SentinelFile, "reboot", a.Rebooter.String(), "bootIDFile", a.BootIDFile,
		"heartbeatNamespace", hbNamespace, "ledger", ledgerNamespace+"/"+ledgerName)
	g.Go(func() error { return recorder.Run(ctx) })
	g.Go(func() error { return agentkube.ServeMetrics(ctx, metricsAddr) })
	g.Go(func() error {
		return agentkube.ServeProbes(ctx, probeAddr, agentkube.Check{Name: "node-cache", Check: a.Ready})
	})
	g.Go(func() error { return a.Run(ctx) })
	return g.Wait()
}
