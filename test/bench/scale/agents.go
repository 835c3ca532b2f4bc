package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/agentkube"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/internal/ipagent"
	"github.com/kubext/kubext/internal/netconf"
	"github.com/kubext/kubext/internal/witnessrun"
	"github.com/kubext/kubext/test/lab"
)

// recorder is a light agent's data plane: it records what the agent asks
// the kernel for and reports it back as programmed, so that many agents'
// real control code (ipagent.Reconciler, heartbeat, Duty) runs in one
// process. What it stands in for, netconf programming the kernel, is
// proven by the netns tests and the e2e tests.
type recorder struct {
	mu      sync.Mutex
	kernel  map[netip.Addr]netconf.Assignment
	fenced  bool
	applies *atomic.Int64
}

func (d *recorder) Apply(_ context.Context, desired []netconf.Assignment) (netconf.Report, error) {
	d.applies.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	report := netconf.Report{Errors: map[netip.Addr]error{}}
	next := map[netip.Addr]netconf.Assignment{}
	for _, a := range desired {
		if d.fenced {
			report.Errors[a.Address] = netconf.ErrFenced
			continue
		}
		if a.Interface == "" {
			a.Interface = "bench0" // the uplink netconf would have chosen
		}
		next[a.Address] = a
	}
	d.kernel = next
	return report, nil
}

func (d *recorder) Current() ([]netconf.Assignment, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Collect(maps.Values(d.kernel)), nil
}

// Refresh is netconf.Dataplane.Refresh: nothing here expires.
func (d *recorder) Refresh() error     { return nil }
func (d *recorder) RefreshGate() error { return nil }

func (d *recorder) Fence(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fenced, d.kernel = true, map[netip.Addr]netconf.Assignment{}
	return nil
}

func (d *recorder) Unfence() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fenced = false
}

// lightAgents runs one light agent per node, each with its own client
// (agentkube, as cmd/ip-agent), connected as that node's deployed ip-agent (service account,
// token bound to the node, RBAC and admission policy enforced), with the
// ip-agent's defaults (lease 2 s, renewed every 500 ms while Duty says the
// node is needed and it holds something on its Lease; 16 s / 8 s while it
// holds only on its witnesses' word) and the witness protocol as the
// deployed agents run it (internal/witnessrun, default timing), each on
// its node's own loopback address (nodeAddr).
type lightAgents struct {
	// requests counts what the agents asked of the API server.
	requests *requestCounts
	applies  atomic.Int64
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func startLightAgents(ctx context.Context, l *lab.Lab, nodes []string, witnessScale int) (*lightAgents, error) {
	base, err := l.RESTConfig()
	if err != nil {
		return nil, err
	}
	args, err := l.WitnessArgs()
	if err != nil {
		return nil, err
	}
	wc := witnessrun.DefaultConfig()
	wc.Port = lab.WitnessPort
	// The light agents share the host's network namespace: no guard
	// table there (the guard is proven by internal/witnessguard's tests).
	wc.Guard = false
	t := &wc.Timing
	for _, d := range []*time.Duration{&t.ProbeInterval, &t.HoldFor, &t.SilentAfter, &t.FenceSlack} {
		*d *= time.Duration(witnessScale)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("the light agents' witness timing: %w", err)
	}
	if witnessScale > 1 {
		fmt.Printf("light agents' witness timing x%d: probe every %s, hold %s, silent after %s, fence slack %s\n",
			witnessScale, t.ProbeInterval, t.HoldFor, t.SilentAfter, t.FenceSlack)
	}
	if i := slices.Index(args, "--witness-key-file"); i >= 0 && i+1 < len(args) {
		wc.KeyFile = args[i+1]
	}
	ctx, cancel := context.WithCancel(ctx)
	a := &lightAgents{cancel: cancel, requests: newRequestCounts()}
	for i, node := range nodes {
		cfg := rest.CopyConfig(base)
		// The agent's own client, limited as cmd/ip-agent's is: not at all
		// on the client's side (controller-runtime's config.GetConfig sets
		// QPS -1 and leaves the API server's priority and fairness to
		// pace it). Until 2026-11-28 this was 0, which client-go reads as
		// 5 a second with a burst of 10: the light agents were throttled
		// where the deployed ones are not.
		cfg.QPS, cfg.Burst = -1, 0
		cfg.Impersonate = lab.IPAgentImpersonation(node)
		cfg.Wrap(a.requests.wrap)
		wc.Host = nodeAddr(i).String()
		if err := a.start(ctx, cfg, node, wc); err != nil {
			cancel()
			return nil, fmt.Errorf("agent of %s: %w", node, err)
		}
	}
	return a, nil
}

func (a *lightAgents) start(ctx context.Context, cfg *rest.Config, node string, wc witnessrun.Config) error {
	log := ctrl.Log.WithValues("node", node)
	scheme, err := ipagent.Scheme()
	if err != nil {
		return err
	}
	c, err := agentkube.New(cfg, scheme)
	if err != nil {
		return err
	}
	events := c.NewRecorder("ip-agent", log.WithName("events"))
	dp := &recorder{kernel: map[netip.Addr]netconf.Assignment{}, fenced: true, applies: &a.applies}
	r := &ipagent.Reconciler{Client: c, Recorder: events, Log: log.WithName("ip-agent"), Node: node, Dataplane: dp}
	if err := r.Setup(); err != nil {
		return err
	}
	leaseREST, err := c.REST(coordinationv1.SchemeGroupVersion)
	if err != nil {
		return err
	}
	leases := heartbeat.SendOnce(leaseREST)
	var hb *heartbeat.Heartbeat
	wit, err := witnessrun.New(ctx, wc, leases, lab.SystemNamespace, node, r, dp, func() { hb.Wake() }, log)
	if err != nil {
		return err
	}
	r.Witness = &ipagent.WitnessConfig{Peer: wit.Peer(), Port: uint16(wc.Port), Nodes: c}
	duty, err := r.NewDuty(func() { hb.Wake() })
	if err != nil {
		return err
	}
	// As cmd/ip-agent configures it, with its default flags.
	hb, err = heartbeat.New(heartbeat.Config{
		Client: leases, Namespace: lab.SystemNamespace,
		Component: ipv1.AgentComponent, Node: node, Duration: 2 * time.Second, RenewInterval: 500 * time.Millisecond,
		OnLost: r.LeaseLost, OnRegained: r.Regained,
		OnRenewed: func() {
			if errors.Is(dp.Refresh(), netconf.ErrLapsed) {
				r.Poke()
			}
		},
		Needed:            duty.Needed,
		Annotations:       wit.Annotations,
		Idle:              wit.Idle(r, duty),
		IdleDuration:      wc.IdleLease,
		IdleRenewInterval: wc.IdleRenew,
		Log:               log.WithName("heartbeat"),
	})
	if err != nil {
		return err
	}
	r.Lease = hb
	// As cmd/ip-agent runs them.
	for _, run := range []func(context.Context) error{r.Run, duty.Start, hb.Start, wit.Start, events.Run} {
		a.wg.Go(func() { _ = run(ctx) })
	}
	return nil
}

func (a *lightAgents) stop() {
	a.cancel()
	a.wg.Wait()
}

// nodeAddr is the i-th node's address: its own loopback address (all of
// 127/8 is loopback on Linux), where its light agent's witness listens and
// its Node's InternalIP points, so that witnesses probe one another as on
// a node network.
func nodeAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 1, byte(i / 250), byte(1 + i%250)})
}
