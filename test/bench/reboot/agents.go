package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/kubext/kubext/internal/agentkube"
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
// client, informer and Event recorder, connected as that node's deployed reboot-agent
// (service account, token bound to the node, RBAC and admission policy
// enforced), reading the approvals ledger from the API server before each
// reboot as cmd/reboot-agent does with --reboot-ledger-namespace. Only the
// process is shared; the reboot is the lab's simulated one (labReboot).
type lightAgents struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	agents []*rebootagent.Agent
}

func startLightAgents(ctx context.Context, l *lab.Lab, downtime time.Duration) (*lightAgents, error) {
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
		if err := a.start(ctx, cfg, l, node, downtime); err != nil {
			a.stop()
			return nil, fmt.Errorf("agent of %s: %w", node, err)
		}
	}
	// Ready as StartRebootAgent waits for it: each cache has synced.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		for _, ag := range a.agents {
			if ag.Ready() != nil {
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

func (a *lightAgents) start(ctx context.Context, cfg *rest.Config, l *lab.Lab, node string, downtime time.Duration) error {
	scheme, err := rebootagent.Scheme()
	if err != nil {
		return err
	}
	c, err := agentkube.New(cfg, scheme)
	if err != nil {
		return err
	}
	events := c.NewRecorder("reboot-agent", logr.Discard())
	ag := &rebootagent.Agent{
		Client: c, Recorder: events,
		Node:     node,
		Rebooter: labReboot{l: l, node: node, downtime: downtime},
		// The bench marks the nodes itself, as the process agents' bench
		// does; a simulated node has no kernel, so its boot ID is the
		// Node's status alone (--boot-id-file=).
		SentinelFile: "",
		Ledger:       &rebootagent.Ledger{Reader: c, Namespace: lab.SystemNamespace, Name: ledgerName},
	}
	a.agents = append(a.agents, ag)
	a.wg.Add(2)
	go func() {
		defer a.wg.Done()
		_ = events.Run(ctx)
	}()
	go func() {
		defer a.wg.Done()
		_ = ag.Run(ctx)
	}()
	return nil
}

func (a *lightAgents) stop() {
	a.cancel()
	a.wg.Wait()
}
