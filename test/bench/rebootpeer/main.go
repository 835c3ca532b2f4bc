// Command rebootpeer is `make bench-reboot-kured KURED=/path/to/kured`:
// kubext's reboot operator and kured side by side on the same lab, the same
// rollout. For each system and each concurrency (kubext's maxUnavailable,
// kured's --concurrency) it brings up a lab of -nodes simulated nodes with a
// Deployment of -pods pods spread over them, runs the system on every node
// the way it is deployed (kubext: the manager's reboot controller, a
// RebootGroup, one reboot-agent process per node; kured: one kured process
// per node as its DaemonSet's pods, see kured.go), both rebooting with the
// lab's simulated reboot (NotReady for -downtime T, new boot ID, Ready),
// creates every node's sentinel file at once and measures the time until
// every node has rebooted exactly once, is Ready and schedulable again and
// nothing holds a slot or lock, against the ideal ceil(nodes/concurrency) ×
// T (drain counted as zero, no soak). An outside watch (test/rebootlab)
// counts boot IDs and the most nodes unavailable at once. The last line of
// its output is machine-readable.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/rebootlab"
)

const (
	podNamespace = "bench-peer"
	group        = "peer"
)

type options struct {
	kured        string
	systems      []string
	concurrency  []int
	nodes, pods  int
	downtime     time.Duration
	period       time.Duration
	sentinelPoll time.Duration
}

type result struct {
	system      string
	concurrency int
	total       time.Duration
	ideal       time.Duration
	maxSeen     int
	once        int
	violations  int
}

func main() {
	var o options
	var systems, concurrency string
	flag.StringVar(&o.kured, "kured", "", "kured binary, built from kured's source (required when kured is among -systems)")
	flag.StringVar(&systems, "systems", "kubext,kured", "systems to run, in order")
	flag.StringVar(&concurrency, "concurrency", "1,2", "concurrencies to run each system at (kubext maxUnavailable, kured --concurrency)")
	flag.IntVar(&o.nodes, "nodes", 10, "simulated nodes")
	flag.IntVar(&o.pods, "pods", 60, "replicas of the Deployment to drain")
	flag.DurationVar(&o.downtime, "downtime", 20*time.Second, "simulated reboot time T: how long a node stays NotReady")
	flag.DurationVar(&o.period, "period", 10*time.Second, "kured's --period (its sentinel check and lock retry period)")
	flag.DurationVar(&o.sentinelPoll, "sentinel-interval", 5*time.Second, "kubext reboot-agent's --sentinel-interval (its default)")
	flag.Parse()
	o.systems = strings.Split(systems, ",")
	for _, c := range strings.Split(concurrency, ",") {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			fmt.Fprintln(os.Stderr, "bench-reboot-kured: -concurrency is a list of positive integers")
			os.Exit(2)
		}
		o.concurrency = append(o.concurrency, n)
	}
	for _, s := range o.systems {
		if s != "kubext" && s != "kured" {
			fmt.Fprintf(os.Stderr, "bench-reboot-kured: unknown system %q\n", s)
			os.Exit(2)
		}
		if s == "kured" && o.kured == "" {
			fmt.Fprintln(os.Stderr, "bench-reboot-kured: -kured /path/to/kured is required (build it from kured's source, outside this repository)")
			os.Exit(2)
		}
	}
	if o.kured != "" {
		abs, err := filepath.Abs(o.kured)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-reboot-kured:", err)
			os.Exit(2)
		}
		o.kured = abs
	}
	var results []result
	for _, s := range o.systems {
		for _, c := range o.concurrency {
			r, err := runOne(o, s, c)
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench-reboot-kured: %s at concurrency %d: %v\n", s, c, err)
				os.Exit(1)
			}
			results = append(results, r)
		}
	}
	fmt.Printf("\n%d nodes, a %d-pod Deployment, simulated reboot T=%s; kured --period %s; kubext sentinel interval %s\n",
		o.nodes, o.pods, o.downtime, o.period, o.sentinelPoll)
	fmt.Println("| system | concurrency | total | ideal | ratio | most unavailable | rebooted once |")
	fmt.Println("|---|---|---|---|---|---|---|")
	var line []string
	for _, r := range results {
		fmt.Printf("| %s | %d | %.1f s | %.0f s | %.2fx | %d | %d of %d |\n", r.system, r.concurrency, r.total.Seconds(), r.ideal.Seconds(),
			r.total.Seconds()/r.ideal.Seconds(), r.maxSeen, r.once, o.nodes)
		line = append(line, fmt.Sprintf("%s_c%d_s=%.1f %s_c%d_ratio=%.2f", r.system, r.concurrency, r.total.Seconds(), r.system, r.concurrency,
			r.total.Seconds()/r.ideal.Seconds()))
	}
	fmt.Printf("nodes=%d pods=%d downtime_s=%.0f kured_period_s=%.0f %s\n", o.nodes, o.pods, o.downtime.Seconds(), o.period.Seconds(), strings.Join(line, " "))
}

func runOne(o options, system string, concurrency int) (res result, err error) {
	res = result{system: system, concurrency: concurrency}
	res.ideal = time.Duration(math.Ceil(float64(o.nodes)/float64(concurrency))) * o.downtime
	bound := 8*res.ideal + 15*time.Minute
	ctx, cancel := context.WithTimeout(interrupted, bound+10*time.Minute)
	defer cancel()
	fmt.Printf("\n== %s, concurrency %d: %d nodes, %d pods, T=%s\n", system, concurrency, o.nodes, o.pods, o.downtime)
	root, err := lab.RepoRoot()
	if err != nil {
		return res, err
	}
	l, err := lab.Up(ctx, lab.Options{Name: "bench-peer", Prefix: "kxbp", Nodes: o.nodes,
		CRDDirs: []string{filepath.Join(root, "config", "crd", "bases")},
		Log:     func(f string, a ...any) { fmt.Printf("lab: "+f+"\n", a...) }})
	if err != nil {
		return res, err
	}
	defer func() {
		l.StopProcesses()
		if derr := l.Down(context.WithoutCancel(ctx)); err == nil {
			err = derr
		}
	}()
	cfg, err := l.RESTConfig()
	if err != nil {
		return res, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return res, err
	}
	if err := rebootv1.AddToScheme(scheme); err != nil {
		return res, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return res, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return res, err
	}
	if err := deployPods(ctx, l, c, o.pods); err != nil {
		return res, err
	}
	fmt.Printf("%d pods Running and Ready\n", o.pods)
	obs, err := rebootlab.Observe(ctx, cs, func(*corev1.Node) string { return group }, map[string]int{group: concurrency})
	if err != nil {
		return res, err
	}
	for _, node := range l.Nodes {
		if err := os.MkdirAll(l.SentinelDir(node), 0o755); err != nil {
			return res, err
		}
	}

	var finished func(context.Context) (bool, error)
	switch system {
	case "kubext":
		finished, err = startKubext(ctx, l, c, obs, o, concurrency)
	case "kured":
		var k *kuredNodes
		finished, k, err = startKured(ctx, l, cs, obs, o, concurrency)
		if k != nil {
			defer k.stop()
		}
	}
	if err != nil {
		return res, err
	}

	start := time.Now()
	for _, node := range l.Nodes {
		if err := os.WriteFile(l.SentinelFile(node), nil, 0o644); err != nil {
			return res, err
		}
	}
	fmt.Printf("All %d sentinel files created\n", o.nodes)
	last := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, bound, true, func(ctx context.Context) (bool, error) {
		rebooted := 0
		for _, n := range l.Nodes {
			if obs.Reboots(n) >= 1 {
				rebooted++
			}
		}
		if time.Since(last) >= 30*time.Second {
			fmt.Printf("  %6.1f s: %d of %d rebooted\n", time.Since(start).Seconds(), rebooted, o.nodes)
			last = time.Now()
		}
		if rebooted < o.nodes {
			return false, nil
		}
		return finished(ctx)
	})
	if err != nil {
		return res, fmt.Errorf("waiting for the rollout: %w", err)
	}
	res.total = time.Since(start)
	for _, n := range l.Nodes {
		if obs.Reboots(n) == 1 {
			res.once++
		}
	}
	res.maxSeen = obs.MaxUnavailable(group)
	res.violations = len(obs.Violations())
	ready, err := readyPods(ctx, c)
	if err != nil {
		return res, err
	}
	fmt.Printf("%s at concurrency %d: %.1f s against an ideal of %.0f s (%.2fx); most unavailable at once %d; %d of %d rebooted exactly once; %d of %d pods Ready\n",
		system, concurrency, res.total.Seconds(), res.ideal.Seconds(), res.total.Seconds()/res.ideal.Seconds(), res.maxSeen, res.once, o.nodes, ready, o.pods)
	if v := obs.Violations(); len(v) > 0 {
		fmt.Printf("  over the concurrency %d times, first: %s\n", len(v), v[0])
	}
	return res, nil
}

// startKubext runs kubext as bench-reboot does, with no soak: the manager's
// reboot controller, one RebootGroup over every node, and one reboot-agent
// process per node watching its sentinel file.
func startKubext(ctx context.Context, l *lab.Lab, c client.Client, obs *rebootlab.Observer, o options, concurrency int) (func(context.Context) (bool, error), error) {
	g := &rebootv1.RebootGroup{
		ObjectMeta: metav1.ObjectMeta{Name: group},
		Spec: rebootv1.RebootGroupSpec{
			MaxUnavailable:       ptr.To(intstr.FromInt32(int32(concurrency))),
			SoakSeconds:          ptr.To[int32](0),
			RebootTimeoutSeconds: 600,
		},
	}
	if err := c.Create(ctx, g); err != nil {
		return nil, err
	}
	m, err := l.StartManager(ctx, "manager", "--controllers", "reboot")
	if err != nil {
		return nil, err
	}
	fmt.Printf("Manager running (log %s)\n", m.Log)
	for _, node := range l.Nodes {
		args := append(l.RebootCommandArgs(node, o.downtime), "--sentinel-interval", o.sentinelPoll.String())
		if _, err := l.StartRebootAgent(ctx, node, args...); err != nil {
			return nil, err
		}
	}
	fmt.Printf("%d reboot-agents running\n", len(l.Nodes))
	return func(context.Context) (bool, error) {
		for _, n := range l.Nodes {
			if !rebootlab.Finished(obs.Node(n)) {
				return false, nil
			}
		}
		return true, nil
	}, nil
}

// startKured runs one kured per node (kured.go) and waits until each has
// passed its start-up (its first look at the lock, 30–90 s after it
// starts, then its first sentinel check), as kureds running long before a
// reboot is needed would have.
func startKured(ctx context.Context, l *lab.Lab, cs kubernetes.Interface, obs *rebootlab.Observer, o options, concurrency int) (func(context.Context) (bool, error), *kuredNodes, error) {
	sa, err := installKured(ctx, l, cs)
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	k := &kuredNodes{l: l, binary: o.kured, saDir: sa, obs: obs, downtime: o.downtime, cancel: cancel,
		args: []string{"--period", o.period.String(), "--concurrency", strconv.Itoa(concurrency),
			"--ds-namespace", kuredNamespace, "--ds-name", kuredName}}
	for _, node := range l.Nodes {
		if err := k.run(sctx, node); err != nil {
			return nil, k, err
		}
	}
	t0 := time.Now()
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute+2*o.period, true, func(context.Context) (bool, error) {
		for _, node := range l.Nodes {
			ok, err := logSays(filepath.Join(l.Dir, "logs", "kured-"+node+"-boot0.log"), "Reboot not required")
			if err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, k, fmt.Errorf("the kureds did not start checking the sentinel (logs in %s): %w", filepath.Join(l.Dir, "logs"), err)
	}
	fmt.Printf("%d kureds running and checking their sentinel (start-up took %.0f s)\n", len(l.Nodes), time.Since(t0).Seconds())
	return func(ctx context.Context) (bool, error) {
		for _, n := range l.Nodes {
			node := obs.Node(n)
			if node == nil || node.Spec.Unschedulable || !lab.NodeReady(node) {
				return false, nil
			}
		}
		holders, err := kuredLockHolders(ctx, cs, l.Nodes)
		return err == nil && len(holders) == 0, err
	}, k, nil
}

func logSays(path, what string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), what) {
			return true, nil
		}
	}
	return false, sc.Err()
}

// deployPods creates the Deployment to drain and waits until its pods run
// (kwok) and are Ready.
func deployPods(ctx context.Context, l *lab.Lab, c client.Client, pods int) error {
	if err := l.EnsureNamespace(ctx, podNamespace); err != nil {
		return err
	}
	labels := map[string]string{"app": "drain-me"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: "drain-me"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(pods)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	if err := c.Create(ctx, d); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := readyPods(ctx, c)
		return n == pods, err
	})
}

func readyPods(ctx context.Context, c client.Client) (int, error) {
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(podNamespace)); err != nil {
		return 0, err
	}
	n := 0
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n, nil
}

// interrupted ends on SIGINT or SIGTERM, so that an interrupted run still
// takes its lab down.
var interrupted, _ = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
