package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kubext/kubext/internal/rebootagent"
	"github.com/kubext/kubext/test/lab"
)

// labReboot is a light agent's reboot: the lab's simulated reboot of its
// node (what `lab reboot --downtime T NODE`, the process agents' reboot
// command, runs), called in this process instead of a child process.
type labReboot struct {
	l        *lab.Lab
	node     string
	downtime time.Duration
}

func (r labReboot) Reboot(ctx context.Context) (string, error) {
	return "", r.l.RebootFor(ctx, r.node, r.downtime)
}

func (r labReboot) String() string {
	return fmt.Sprintf("lab reboot --downtime %s %s (in process)", r.downtime, r.node)
}

// lightAgents runs one light agent per node: the reboot-agent's real
// control code (rebootagent.Agent: its watch on its own Node, the order
// checks, the ledger check, once-per-boot memory), each with its own
// manager, cache and client, connected as that node's deployed reboot-agent
// (service account, token bound to the node, RBAC and admission policy
// enforced), reading the approvals ledger from the API server before each
// reboot as cmd/reboot-agent does with --reboot-ledger-namespace. Only the
// process is shared; the reboot is the lab's simulated one (labReboot).
type lightAgents struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	agents []*rebootagent.Agent
}

func startLightAgents(ctx context.Context, l *lab.Lab, scheme *runtime.Scheme, downtime time.Duration) (*lightAgents, error) {
	if err := l.InstallRebootAgent(ctx); err != nil {
		return nil, err
	}
	base, err := l.RESTConfig()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	a := &lightAgents{cancel: cancel}
	for _, node := range l.Nodes {
		cfg := rest.CopyConfig(base)
		// The agent's own client, at the rate controller-runtime's
		// config.GetConfig gives cmd/reboot-agent.
		cfg.QPS, cfg.Burst = 20, 30
		cfg.Impersonate = lab.RebootAgentImpersonation(node)
		if err := a.start(ctx, cfg, scheme, l, node, downtime); err != nil {
			a.stop()
			return nil, fmt.Errorf("agent of %s: %w", node, err)
		}
	}
	// Ready as StartRebootAgent waits for it: each cache has synced.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		for _, ag := range a.agents {
			if ag.Ready(nil) != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		a.stop()
		return nil, fmt.Errorf("the light agents did not sync: %w", err)
	}
	return a, nil
}

func (a *lightAgents) start(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, l *lab.Lab, node string, downtime time.Duration) error {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  rebootagent.CacheOptions(node),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Every agent runs a controller named reboot-agent, in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	ag := &rebootagent.Agent{
		Client: mgr.GetClient(), Cache: mgr.GetCache(), Recorder: mgr.GetEventRecorder("reboot-agent"),
		Node:     node,
		Rebooter: labReboot{l: l, node: node, downtime: downtime},
		// The bench marks the nodes itself, as the process agents' bench
		// does; a simulated node has no kernel, so its boot ID is the
		// Node's status alone (--boot-id-file=).
		SentinelFile: "",
		Ledger:       &rebootagent.Ledger{Reader: mgr.GetAPIReader(), Namespace: lab.SystemNamespace, Name: ledgerName},
	}
	if err := ag.SetupWithManager(mgr); err != nil {
		return err
	}
	a.agents = append(a.agents, ag)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		_ = mgr.Start(ctx)
	}()
	return nil
}

func (a *lightAgents) stop() {
	a.cancel()
	a.wg.Wait()
}
