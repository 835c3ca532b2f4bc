// Command scale is `make bench-scale`: static IPs at scale on a lab of
// simulated (kwok) nodes. It creates -ips IPs of one pool that selects
// every node, each claimed by one pod (spread over -nodes nodes, run by
// kwok), runs one light agent per node (the ip-agent's real control code
// with a recording data plane, see agents.go) in this process, then starts
// the manager and measures how long it takes until every IP is allocated
// and attached, against the floor: the time the same client, at the same
// QPS as the manager's, takes to create -ips IPAddress objects and make
// -ips status patches directly. It then measures the steady state: API
// writes per node per second (the API server's apiserver_request_total),
// and the manager's memory. The last line of its output is
// machine-readable.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	_ "net/http/pprof" // -pprof-addr
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/test/bench/stats"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/testenv"
)

const (
	namespace = "bench"
	poolName  = "bench-scale"
	nodeLabel = "bench.kubext.io/scale"
)

// poolCIDR and floorCIDR are in 198.18.0.0/15 (RFC 2544, benchmarking):
// nothing is programmed (recording data plane), and they overlap nothing
// of the lab's.
var (
	poolCIDR  = netip.MustParsePrefix("198.18.0.0/17")
	floorCIDR = netip.MustParsePrefix("198.19.0.0/17")
)

type options struct {
	nodes, ips      int
	qps             float64
	burst, workers  int
	timeout, steady time.Duration
	manager         string
	profile         time.Duration
	finalizerPolicy bool
	witnessScale    int
	pprofAddr       string
}

func main() {
	var o options
	flag.IntVar(&o.nodes, "nodes", 1000, "simulated nodes (kwok), each with a light agent")
	flag.IntVar(&o.ips, "ips", 10000, "IPs, each claimed by one pod")
	flag.Float64Var(&o.qps, "qps", 100, "the manager's --kube-api-qps, and the floor client's QPS")
	flag.IntVar(&o.burst, "burst", 200, "the manager's --kube-api-burst, and the floor client's burst")
	flag.IntVar(&o.workers, "workers", 8, "the manager's --ip-workers")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "bound on the whole run")
	flag.DurationVar(&o.steady, "steady", 20*time.Second, "window over which steady-state writes are counted")
	flag.StringVar(&o.manager, "manager", "", "manager binary (default bin/manager; to compare builds)")
	flag.BoolVar(&o.finalizerPolicy, "finalizer-policy", true, "install the IP finalizer policy (config/policy/ip-finalizer.yaml) as deployed; false: the manager adds every IP's finalizer itself")
	flag.IntVar(&o.witnessScale, "witness-timing-scale", 1, "multiply the light agents' witness timing (probe interval, hold, silent-after, fence slack; the safety inequality is linear in them) by this: "+
		"1 is the ip-agent's defaults; more spares the single process's CPU, whose stalls otherwise lapse holds that a node with its own CPU keeps")
	flag.DurationVar(&o.profile, "profile", 30*time.Second, "how long a CPU profile of the manager is taken from its start (kept beside its log; 0: none)")
	flag.StringVar(&o.pprofAddr, "pprof-addr", "", "serve this process's pprof (the light agents' CPU and heap) on this address, e.g. 127.0.0.1:6062 (empty: off)")
	flag.Parse()
	if o.pprofAddr != "" {
		go func() { _ = http.ListenAndServe(o.pprofAddr, nil) }() //nolint:gosec // a bench's local debug endpoint
	}
	if o.ips > 1<<15 || o.nodes < 1 || o.ips < 1 || o.witnessScale < 1 {
		fmt.Fprintln(os.Stderr, "bench-scale: need 1 <= -nodes, 1 <= -ips <= 32768, 1 <= -witness-timing-scale")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		os.Exit(1)
	}
}

func run(o options) (err error) {
	// Interrupted, the run still takes its lab down (the deferred Down).
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(sigCtx, o.timeout)
	defer cancel()
	root, err := lab.RepoRoot()
	if err != nil {
		return err
	}
	l, err := lab.Up(ctx, lab.Options{Name: "bench-scale", Prefix: "kxbs", Nodes: 1,
		CRDDirs: []string{filepath.Join(root, "config", "crd", "bases")},
		Log:     func(f string, a ...any) { fmt.Printf("lab: "+f+"\n", a...) }})
	if err != nil {
		return err
	}
	// The agents' log, and the manager's kept past the lab's teardown.
	logs := filepath.Join(os.TempDir(), "bench-scale")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	agentLog, err := os.Create(filepath.Join(logs, "agents.log"))
	if err != nil {
		return err
	}
	defer agentLog.Close()
	ctrl.SetLogger(zap.New(zap.WriteTo(agentLog)))
	var sup *supervisor // the manager, once started
	defer func() {
		if sup != nil {
			for _, log := range sup.logs() {
				if b, rerr := os.ReadFile(log); rerr == nil {
					_ = os.WriteFile(filepath.Join(logs, filepath.Base(log)), b, 0o644)
				}
			}
			fmt.Printf("logs kept in %s\n", logs)
		}
		if derr := l.Down(context.WithoutCancel(ctx)); err == nil {
			err = derr
		}
	}()
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := ipv1.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := l.RESTConfig()
	if err != nil {
		return err
	}
	// The setup's client is fast; the floor's has the manager's QPS.
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	// The floor's writes are the manager's, made as the manager (its
	// service account, in its priority level), at its QPS.
	if err := l.InstallManagerAccess(ctx); err != nil {
		return err
	}
	floorCfg, _ := l.RESTConfig()
	floorCfg.QPS, floorCfg.Burst = float32(o.qps), o.burst
	floorCfg.Impersonate = lab.ManagerImpersonation()
	floorClient, err := client.New(floorCfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := l.EnsureNamespace(ctx, namespace); err != nil {
		return err
	}
	if err := l.InstallIPAgent(ctx); err != nil {
		return err
	}

	nodes := make([]string, o.nodes)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("scale-%04d", i)
	}
	t0 := time.Now()
	if err := createNodes(ctx, c, nodes); err != nil {
		return err
	}
	fmt.Printf("%d kwok nodes Ready in %.1f s\n", len(nodes), time.Since(t0).Seconds())

	// Background writes (kwok's nodes, the control plane's leader Leases)
	// before kubext runs.
	background, err := writesOver(ctx, cs, 10*time.Second)
	if err != nil {
		return err
	}
	describeRates("background writes (before kubext)", background)

	floor, err := measureFloor(ctx, c, floorClient, o.ips)
	if err != nil {
		return err
	}
	fmt.Printf("floor: %d IPAddress creates + %d status patches at QPS %.0f/%d: %.1f s\n", o.ips, o.ips, o.qps, o.burst, floor.Seconds())

	// The finalizer policy, as deployed, after the floor: the floor's IPs
	// are deleted with nobody to remove a finalizer.
	if o.finalizerPolicy {
		if _, err := l.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(root, "config", "policy", "ip-finalizer.yaml")); err != nil {
			return err
		}
		if err := testenv.WaitIPFinalizerPolicy(ctx, c); err != nil {
			return err
		}
		fmt.Println("IP finalizer policy installed")
	}

	// The pool, the IPs and their pods, before anything of kubext runs.
	t0 = time.Now()
	if err := createWorkload(ctx, c, nodes, o.ips); err != nil {
		return err
	}
	fmt.Printf("pool, %d IPs and %d claiming pods created in %.1f s\n", o.ips, o.ips, time.Since(t0).Seconds())
	if err := waitPodsReady(ctx, c, o.ips); err != nil {
		return err
	}
	fmt.Printf("%d pods Running and Ready (kwok) after %.1f s\n", o.ips, time.Since(t0).Seconds())

	runtime.GC()
	rssBefore := stats.RSSMiB(os.Getpid())
	agents, err := startLightAgents(ctx, l, nodes, o.witnessScale)
	if err != nil {
		return err
	}
	defer agents.stop()
	fmt.Printf("%d light agents started\n", len(nodes))

	obs, err := observe(ctx, c)
	if err != nil {
		return err
	}
	bin := o.manager
	if bin == "" {
		bin = filepath.Join(l.BinDir, "manager")
	}
	pprofAddr, err := freeAddr()
	if err != nil {
		return err
	}
	before, err := writes(ctx, cs)
	if err != nil {
		return err
	}
	start := time.Now()
	startManager := func(name string) (*lab.Manager, error) {
		return l.StartManagerBinary(ctx, bin, name, "--controllers", "ip,ippool",
			"--kube-api-qps", strconv.FormatFloat(o.qps, 'f', -1, 64), "--kube-api-burst", strconv.Itoa(o.burst),
			"--ip-workers", strconv.Itoa(o.workers), "--pprof-bind-address", pprofAddr)
	}
	m, err := startManager("manager")
	if err != nil {
		return err
	}
	fmt.Printf("manager started (log %s)\n", m.Log)
	sup = &supervisor{m: m, logPaths: []string{m.Log}}
	supCtx, stopSup := context.WithCancel(ctx)
	defer stopSup() // before the lab stops the manager
	go sup.run(supCtx, startManager)
	if o.profile > 0 {
		// The manager's CPU profile over the start of the convergence.
		go profile(ctx, "http://"+pprofAddr+"/debug/pprof/profile?seconds="+strconv.Itoa(int(o.profile.Seconds())),
			filepath.Join(logs, "manager.cpu.pprof"))
		// And this process's: the light agents (and the observer).
		go profileSelf(ctx, o.profile, filepath.Join(logs, "agents.cpu.pprof"))
	}
	last, lastRequests := time.Now(), time.Now()
	agents.requests.rates(0) // from the start of the convergence
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		ready := obs.ready()
		if time.Since(lastRequests) >= time.Minute {
			// What the agents asked; the rest of what the API server
			// counts is the manager's, kwok's and this bench's.
			fmt.Printf("  light agents' requests over the last minute (≥ 1/s): %s\n", agents.requests.rates(1))
			lastRequests = time.Now()
		}
		if time.Since(last) >= 10*time.Second {
			// A List beside the watch tells a stalled watch (the List
			// sees more Ready than the observer) from Ready writes that
			// did not happen (both agree).
			fmt.Printf("  %6.1f s: %d of %d Ready (a List sees %d; %d watches opened); manager RSS %.0f MiB\n",
				time.Since(start).Seconds(), ready, o.ips, listReady(ctx, c), obs.watches(), stats.RSSMiB(sup.manager().PID()))
			last = time.Now()
		}
		return ready == o.ips, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d IPs to be Ready (%d are): %w", o.ips, obs.ready(), err)
	}
	converge := time.Since(start)
	declaredConverging, lostConverging := witnessChurn()
	fmt.Printf("a List sees %d of %d Ready now\n", listReady(ctx, c), o.ips)
	if after, err := writes(ctx, cs); err == nil {
		writesPerIP(before, after, o.ips)
	}
	attach := obs.latencies(obs.placed, obs.readyT)
	p99 := stats.Percentile(attach, 99)
	fmt.Printf("all %d IPs Ready in %.1f s (floor %.1f s); attach (placed -> Ready) p50 %.3f s p99 %.3f s\n",
		o.ips, converge.Seconds(), floor.Seconds(), stats.Percentile(attach, 50), p99)
	claim, confirm := obs.latencies(obs.placed, obs.claimed), obs.latencies(obs.claimed, obs.readyT)
	fmt.Printf("of which placed -> claimed by the node's agent p50 %.3f s p99 %.3f s, claimed -> Ready p50 %.3f s p99 %.3f s\n",
		stats.Percentile(claim, 50), stats.Percentile(claim, 99), stats.Percentile(confirm, 50), stats.Percentile(confirm, 99))

	// Steady state: nothing changes; what do kubext's components write?
	// First the writes that trail the convergence drain (the recorders'
	// queued Events are most of them).
	settled, err := settle(ctx, cs, 3*time.Minute)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		fmt.Printf("%v: measuring the steady state anyway\n", err)
	default:
		fmt.Printf("trailing writes drained %.0f s after convergence\n", settled.Seconds())
	}
	cpu0, t0 := cpuSeconds(os.Getpid()), time.Now()
	renewals, err := countRenewals(ctx, cs)
	if err != nil {
		return err
	}
	steady, err := writesOver(ctx, cs, o.steady)
	if err != nil {
		return err
	}
	describeRates("steady writes", steady)
	said, renewed := renewals()
	fmt.Println(said)
	// What the light agents (witness probes and answers, heartbeats,
	// resyncs) cost this process in the steady state, per agent.
	fmt.Printf("steady CPU of the light agents: %.1f ms/s per agent (this process, the observer included)\n",
		(cpuSeconds(os.Getpid())-cpu0)/time.Since(t0).Seconds()/float64(o.nodes)*1000)
	perNode := (kubextWrites(steady) + renewed) / float64(o.nodes)
	// No node dies in this bench: every declaration is a false one, and
	// each costs its holder a new generation and its IPs a re-claim.
	declared, lost := witnessChurn()
	fmt.Printf("witness declarations (all false: no node died): %.0f while converging, %.0f in the steady state; generations lost: %.0f, %.0f\n",
		declaredConverging, declared-declaredConverging, lostConverging, lost-lostConverging)
	fmt.Printf("steady writes of kubext (the agents' heartbeat renewals, IPs, IPAddresses, IPPools, Events): %.3f per node per second\n", perNode)

	managerRSS, restarts := sup.peak()
	if restarts > 0 {
		fmt.Printf("the manager was started again %d times (it exits when it loses its leader Lease)\n", restarts)
	}
	runtime.GC()
	agentRSS := (stats.RSSMiB(os.Getpid()) - rssBefore) / float64(o.nodes)
	fmt.Printf("manager peak RSS %.0f MiB; light agents: %.2f MiB each (this process's RSS growth / agents), %d Applies\n",
		managerRSS, agentRSS, agents.applies.Load())
	fmt.Printf("nodes=%d ips=%d converge_s=%.1f floor_s=%.1f ratio=%.2f claims_per_s=%.0f attach_p99_s=%.3f writes_per_node_s=%.3f manager_rss_mib=%.0f agent_rss_mib=%.2f\n",
		o.nodes, o.ips, converge.Seconds(), floor.Seconds(), converge.Seconds()/floor.Seconds(),
		float64(o.ips)/converge.Seconds(), p99, perNode, managerRSS, agentRSS)
	return nil
}

// parallel runs fn(i) for i in [0, n) on 32 goroutines.
func parallel(n int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan int)
	)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// createNodes registers kwok nodes, each with a pod range of its own (kwok
// gives pods addresses from it), waits until kwok has them Ready, and gives
// each its loopback address (nodeAddr) as InternalIP: the address its
// agent's witnesses probe.
func createNodes(ctx context.Context, c client.Client, nodes []string) error {
	err := parallel(len(nodes), func(i int) error {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodes[i],
			Labels:      map[string]string{"type": "kwok", nodeLabel: "yes", "kubernetes.io/hostname": nodes[i]},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
			Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256)}}
		n.Spec.PodCIDRs = []string{n.Spec.PodCIDR}
		return c.Create(ctx, n)
	})
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list := &corev1.NodeList{}
		if err := c.List(ctx, list, client.MatchingLabels{nodeLabel: "yes"}); err != nil {
			return false, err
		}
		ready := 0
		for _, n := range list.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == len(nodes), nil
	})
	if err != nil {
		return err
	}
	// Only once kwok has initialised the node (its first status write
	// would undo it); kwok keeps the field from then on.
	return parallel(len(nodes), func(i int) error {
		patch := fmt.Appendf(nil, `{"status":{"addresses":[{"type":"InternalIP","address":%q},{"type":"Hostname","address":%q}]}}`,
			nodeAddr(i), nodes[i])
		return c.Status().Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodes[i]}}, client.RawPatch(types.MergePatchType, patch))
	})
}

// measureFloor is the time manager (the manager's identity and QPS) takes
// to create n IPAddress objects and make n status patches (of n IPs c made
// for it beforehand, not timed), the API writes an IP needs at the least;
// c deletes them all afterwards.
func measureFloor(ctx context.Context, c, manager client.Client, n int) (time.Duration, error) {
	addrs := addresses(floorCIDR, n)
	names := make([]string, n)
	if err := parallel(n, func(i int) error {
		names[i] = fmt.Sprintf("floor-%05d", i)
		return c.Create(ctx, &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: names[i]}, Spec: ipv1.IPSpec{Address: addrs[i].String(), Pool: "no-such-pool"}})
	}); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := parallel(n, func(i int) error {
		a := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: addrs[i].String()},
			Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Group: ipv1.GroupVersion.Group, Resource: "ips", Name: names[i]}}}
		return manager.Create(ctx, a)
	}); err != nil {
		return 0, err
	}
	if err := parallel(n, func(i int) error {
		patch := fmt.Appendf(nil, `{"status":{"address":%q,"assigned":true}}`, addrs[i])
		return manager.Status().Patch(ctx, &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: names[i]}}, client.RawPatch(types.MergePatchType, patch))
	}); err != nil {
		return 0, err
	}
	floor := time.Since(start)
	err := parallel(n, func(i int) error {
		err := c.Delete(ctx, &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: addrs[i].String()}})
		if err == nil || apierrors.IsNotFound(err) {
			err = c.Delete(ctx, &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: names[i]}})
		}
		return client.IgnoreNotFound(err)
	})
	return floor, err
}

func addresses(p netip.Prefix, n int) []netip.Addr {
	out := make([]netip.Addr, 0, n)
	for a := p.Addr().Next(); len(out) < n; a = a.Next() {
		out = append(out, a)
	}
	return out
}

// createWorkload creates the pool (it selects the bench's nodes; pods of
// the bench namespace may claim), the IPs (address from the pool) and one
// claiming pod per IP, spread round-robin over the nodes.
func createWorkload(ctx context.Context, c client.Client, nodes []string, n int) error {
	pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: poolName}, Spec: ipv1.IPPoolSpec{
		Addresses:    []string{poolCIDR.String()},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{nodeLabel: "yes"}},
		Claimants:    &ipv1.PoolClaimants{Namespaces: []string{namespace}},
	}}
	if err := c.Create(ctx, pool); err != nil {
		return err
	}
	return parallel(n, func(i int) error {
		name := fmt.Sprintf("ip-%05d", i)
		if err := c.Create(ctx, &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: poolName}}); err != nil {
			return err
		}
		return c.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "claim-" + name, Annotations: map[string]string{ipv1.AnnotationIP: name}},
			Spec: corev1.PodSpec{NodeName: nodes[i%len(nodes)], Containers: []corev1.Container{{Name: "app", Image: "app:1"}},
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
		})
	})
}

func waitPodsReady(ctx context.Context, c client.Client, n int) error {
	return wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(namespace)); err != nil {
			return false, err
		}
		ready := 0
		for _, p := range pods.Items {
			if p.Status.PodIP != "" && isReady(p.Status.Conditions) {
				ready++
			}
		}
		return ready == n, nil
	})
}

func isReady(cs []corev1.PodCondition) bool {
	for _, c := range cs {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// observer watches the IPs: when each was first placed on a node
// (status.node) and when it turned Ready.
//
// It is an informer, not a raw watch: at 1,000 IPs the API server ends a
// long watch (its timeout, or a 410 after compaction) well before the run
// converges, and a raw watch then stops reporting for good, which is how a
// 100-node run once "saw no Ready IP in 650 s". The informer relists and
// rewatches; an IP whose transition fell into such a gap is seen at the
// relist, so its time is late, never missing.
type observer struct {
	mu sync.Mutex
	// placed: status.node first set; claimed: attachedNode first equal
	// to it (the agent's claim); readyT: Ready first True.
	placed, claimed, readyT map[string]time.Time
	rewatches               int
}

func observe(ctx context.Context, c client.WithWatch) (*observer, error) {
	o := &observer{placed: map[string]time.Time{}, claimed: map[string]time.Time{}, readyT: map[string]time.Time{}}
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (k8sruntime.Object, error) {
			l := &ipv1.IPList{}
			return l, c.List(ctx, l, &client.ListOptions{Raw: &opts})
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			o.mu.Lock()
			o.rewatches++
			o.mu.Unlock()
			return c.Watch(ctx, &ipv1.IPList{}, &client.ListOptions{Raw: &opts})
		},
	}
	_, inf := toolscache.NewInformerWithOptions(toolscache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &ipv1.IP{},
		Handler: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { o.see(obj) },
			UpdateFunc: func(_, obj any) { o.see(obj) },
		},
	})
	go inf.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("the IP informer did not sync: %w", ctx.Err())
	}
	return o, nil
}

func (o *observer) see(obj any) {
	ip, ok := obj.(*ipv1.IP)
	if !ok || !strings.HasPrefix(ip.Name, "ip-") {
		return
	}
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.placed[ip.Name]; !ok && ip.Status.Node != "" {
		o.placed[ip.Name] = now
	}
	if _, ok := o.claimed[ip.Name]; !ok && ip.Status.Node != "" && ip.Status.AttachedNode == ip.Status.Node {
		o.claimed[ip.Name] = now
	}
	if _, ok := o.readyT[ip.Name]; !ok && meta.IsStatusConditionTrue(ip.Status.Conditions, ipv1.ConditionReady) {
		o.readyT[ip.Name] = now
	}
}

// listReady counts the Ready bench IPs by a List (-1 if the List fails).
func listReady(ctx context.Context, c client.Client) int {
	l := &ipv1.IPList{}
	if err := c.List(ctx, l); err != nil {
		return -1
	}
	n := 0
	for i := range l.Items {
		if strings.HasPrefix(l.Items[i].Name, "ip-") && meta.IsStatusConditionTrue(l.Items[i].Status.Conditions, ipv1.ConditionReady) {
			n++
		}
	}
	return n
}

// watches is how many watches the observer opened (1 + its reconnects).
func (o *observer) watches() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rewatches
}

func (o *observer) ready() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.readyT)
}

// latencies are, per IP seen at both, the time from its first sighting in
// from to its first in to: placed -> readyT is the attach latency.
// Called once the run is over (it reads the maps under the lock).
func (o *observer) latencies(from, to map[string]time.Time) []float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]float64, 0, len(to))
	for name, t := range to {
		if f, ok := from[name]; ok {
			out = append(out, t.Sub(f).Seconds())
		}
	}
	return out
}

// writesOver is the API server's write rate (apiserver_request_total of
// POST, PUT, PATCH, DELETE and APPLY, every client) over window.
func writesOver(ctx context.Context, cs *kubernetes.Clientset, window time.Duration) (map[string]float64, error) {
	a, err := writes(ctx, cs)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(window):
	}
	b, err := writes(ctx, cs)
	if err != nil {
		return nil, err
	}
	secs := time.Since(start).Seconds()
	rates := map[string]float64{}
	for k, v := range b {
		if d := (v - a[k]) / secs; d > 0 {
			rates[k] = d
		}
	}
	return rates, nil
}

// describeRates prints rates by verb and resource, the largest first.
func describeRates(what string, rates map[string]float64) {
	fmt.Printf("%s: %.1f/s: %s\n", what, total(rates), largestFirst(rates, 0.05))
}

// largestFirst lists the entries of m of at least atLeast, "key value",
// the largest first.
func largestFirst(m map[string]float64, atLeast float64) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(x, y string) int { return cmp.Compare(m[y], m[x]) })
	var parts []string
	for _, k := range keys {
		if m[k] >= atLeast {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
		}
	}
	return strings.Join(parts, ", ")
}

// kubextWrites is the part of rates to resources only kubext's components
// write here (IPs, IPAddresses, IPPools, Events). Its Lease writes, the
// agents' heartbeats, are counted by a watch on those Leases
// (countRenewals): the API server's count of Lease writes also holds
// kwok's node Leases and the control plane's leader Leases, which until
// 2026-11-28 were subtracted as measured before kubext ran, when kwok's
// node Leases had not reached their steady rate (~5/s at 100 nodes were
// counted as kubext's).
func kubextWrites(rates map[string]float64) float64 {
	var sum float64
	for k, v := range rates {
		_, res, _ := strings.Cut(k, " ")
		res, _, _ = strings.Cut(res, "/")
		switch res {
		case "ips", "ipaddresses", "ippools", "events":
			sum += v
		}
	}
	return sum
}

// settle waits, up to limit, until the writes that trail a convergence
// (Events queued by the components' recorders, late status writes) have
// drained: a 5 s window with less than one Event or IP write a second.
func settle(ctx context.Context, cs *kubernetes.Clientset, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	for time.Since(start) < limit {
		r, err := writesOver(ctx, cs, 5*time.Second)
		if err != nil {
			return 0, err
		}
		if r["POST events"]+r["PATCH ips/status"]+r["PATCH ips"] < 1 {
			return time.Since(start), nil
		}
	}
	return time.Since(start), fmt.Errorf("writes still trailing %s after convergence", limit)
}

// writes are the API server's writes so far (apiserver_request_total of
// POST, PUT, PATCH, DELETE and APPLY, every client), by verb, resource and
// subresource.
func writes(ctx context.Context, cs *kubernetes.Clientset) (map[string]float64, error) {
	load, err := stats.ReadAPIServerLoad(ctx, cs.RESTClient())
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for kind, n := range load.Requests {
		verb, _, _ := strings.Cut(kind, " ")
		if slices.Contains([]string{"POST", "PUT", "PATCH", "DELETE", "APPLY"}, verb) {
			out[kind] = n
		}
	}
	return out, nil
}

func total(w map[string]float64) float64 {
	var t float64
	for _, v := range w {
		t += v
	}
	return t
}

// writesPerIP prints the writes made between a and b, per IP, by kind,
// most first: where the convergence's writes go.
func writesPerIP(a, b map[string]float64, ips int) {
	perIP := map[string]float64{}
	for k, v := range b {
		perIP[k] = (v - a[k]) / float64(ips)
	}
	fmt.Printf("writes per IP while converging (every client, kwok's included): %.2f in all; %s\n",
		(total(b)-total(a))/float64(ips), largestFirst(perIP, 0.1))
}

// freeAddr is a loopback address with a port nothing listens on.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// profile saves what url serves to path (a failure is reported, not fatal).
func profile(ctx context.Context, url, path string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err == nil {
		var resp *http.Response
		if resp, err = http.DefaultClient.Do(req); err == nil {
			defer resp.Body.Close()
			var f *os.File
			if f, err = os.Create(path); err == nil {
				_, err = io.Copy(f, resp.Body)
				err = errors.Join(err, f.Close())
			}
		}
	}
	if err != nil {
		fmt.Printf("manager profile: %v\n", err)
		return
	}
	fmt.Printf("manager CPU profile kept in %s\n", path)
}

// cpuSeconds is the user and system CPU time of a process so far (from
// /proc/<pid>/stat, in clock ticks of 1/100 s on Linux).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name (which may hold spaces) start at
	// the last ')'; utime and stime are the 14th and 15th fields.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

// profileSelf takes this process's CPU profile for d into path.
func profileSelf(ctx context.Context, d time.Duration, path string) {
	f, err := os.Create(path)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err == nil {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
			pprof.StopCPUProfile()
		}
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		fmt.Printf("light agents' profile: %v\n", err)
		return
	}
	fmt.Printf("light agents' CPU profile kept in %s\n", path)
}

// witnessChurn reads the light agents' witness counters (they share this
// process's registry): declarations made, generations lost.
func witnessChurn() (declared, lost float64) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return 0, 0
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "kubext_witness_declarations_total":
				declared += m.GetCounter().GetValue()
			case "kubext_witness_generations_lost_total":
				lost += m.GetCounter().GetValue()
			}
		}
	}
	return declared, lost
}

// countRenewals watches the agents' heartbeat Leases from now; the
// returned function stops and says how often each node renewed (the
// nodes that renew at the full rate, holding something on their Lease,
// stand out from the idle ones).
func countRenewals(ctx context.Context, cs *kubernetes.Clientset) (func() (string, float64), error) {
	w, err := cs.CoordinationV1().Leases(lab.SystemNamespace).Watch(ctx, metav1.ListOptions{
		LabelSelector: heartbeat.LabelComponent + "=" + ipv1.AgentComponent})
	if err != nil {
		return nil, fmt.Errorf("watching the heartbeat Leases: %w", err)
	}
	start := time.Now()
	counts := map[string]int{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type == watch.Modified {
				counts[l.Name]++
			}
		}
	}()
	return func() (string, float64) {
		w.Stop()
		<-done
		secs := time.Since(start).Seconds()
		var rates []float64
		busiest, most := "", 0
		for name, n := range counts {
			rates = append(rates, float64(n)/secs)
			if n > most {
				busiest, most = name, n
			}
		}
		fast := 0
		for _, r := range rates {
			if r > 0.5 {
				fast++
			}
		}
		var total float64
		for _, r := range rates {
			total += r
		}
		return fmt.Sprintf("heartbeat renewals: %.1f/s, %d Leases renewed in %.0f s, per Lease p50 %.3f/s max %.2f/s (%s); %d at more than 0.5/s (holding something on their Lease)",
			total, len(counts), secs, stats.Percentile(rates, 50), float64(most)/secs, busiest, fast), total
	}, nil
}

// supervisor keeps the manager running as its Deployment would: a manager
// that exits (as it must when it loses its leader Lease to an API server
// too slow to renew it) is started again a second later. It also keeps
// the highest peak RSS of every manager it ran.
type supervisor struct {
	mu       sync.Mutex
	m        *lab.Manager
	restarts int
	peakMiB  float64
	logPaths []string
}

func (s *supervisor) logs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.logPaths)
}

func (s *supervisor) manager() *lab.Manager {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m
}

// peak is the highest peak RSS of the managers run so far, and how many
// times one was started again.
func (s *supervisor) peak() (float64, int) {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakMiB, s.restarts
}

func (s *supervisor) sample() {
	m := s.manager()
	if rss := stats.PeakRSSMiB(m.PID()); rss > 0 {
		s.mu.Lock()
		s.peakMiB = max(s.peakMiB, rss)
		s.mu.Unlock()
	}
}

func (s *supervisor) run(ctx context.Context, start func(name string) (*lab.Manager, error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		s.sample()
		if s.manager().Running() {
			continue
		}
		s.mu.Lock()
		name := fmt.Sprintf("manager-%d", s.restarts+1)
		s.mu.Unlock()
		fmt.Printf("the manager exited (log %s); starting it again as %s, as its Deployment would\n", s.manager().Log, name)
		m, err := start(name)
		if err != nil {
			fmt.Printf("starting the manager again: %v\n", err)
			continue
		}
		s.mu.Lock()
		s.m, s.restarts = m, s.restarts+1
		s.logPaths = append(s.logPaths, m.Log)
		s.mu.Unlock()
	}
}
