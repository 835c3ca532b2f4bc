// Command reboot is `make bench-reboot`: a rolling reboot of every node of
// a lab of simulated nodes (default 50, one group, maxUnavailable 5), each
// node's agent running the lab's simulated reboot (NotReady for -downtime,
// new boot ID, Ready). Each node's agent is a reboot-agent process, or,
// with -agents light (the default above 100 nodes), the agent's real control
// code run in this process, many agents per process (agents.go). It compares the rollout's total time with the ideal
// ceil(nodes/maxUnavailable) × (drain + downtime + soak), measures the
// controller's decision latency (a slot freed, i.e. a node's soak over, to
// the next node approved, as seen by an outside watch), and the most nodes
// unavailable at once. The last line of its output is machine-readable.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/test/bench/stats"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/rebootlab"
)

func main() {
	nodes := flag.Int("nodes", 50, "simulated nodes, all in one group")
	maxUnavailable := flag.Int("max-unavailable", 5, "the group's maxUnavailable")
	downtime := flag.Duration("downtime", 10*time.Second, "simulated reboot time T: how long a node stays NotReady")
	soak := flag.Duration("soak", 5*time.Second, "the group's soakSeconds")
	agents := flag.String("agents", "", "process (one reboot-agent process per node) or light (the agent's control code, every agent in this process); default process up to 100 nodes, light above")
	manager := flag.String("manager", "", "manager binary (default bin/manager; to compare builds)")
	flag.Parse()
	if *agents == "" {
		*agents = "process"
		if *nodes > 100 {
			*agents = "light"
		}
	}
	if *agents != "process" && *agents != "light" {
		fmt.Fprintln(os.Stderr, "bench-reboot: -agents is process or light")
		os.Exit(2)
	}
	if err := run(*nodes, *maxUnavailable, *downtime, *soak, *agents, *manager); err != nil {
		fmt.Fprintln(os.Stderr, "bench-reboot:", err)
		os.Exit(1)
	}
}

// ledgerName is the reboot controller's approvals ledger, as the manager
// names it by default.
const ledgerName = rebootv1.DefaultLedgerName

func run(nodes, maxUnavailable int, downtime, soak time.Duration, agents, manager string) (err error) {
	batches := math.Ceil(float64(nodes) / float64(maxUnavailable))
	ideal := time.Duration(batches) * (downtime + soak)
	// Bounds: the rollout may take twice the ideal and ten minutes more.
	rolloutBound := 2*ideal + 10*time.Minute
	ctx, cancel := context.WithTimeout(interrupted, rolloutBound+15*time.Minute)
	defer cancel()
	root, err := lab.RepoRoot()
	if err != nil {
		return err
	}
	// controller-runtime's log (the lab's CRD install, the light agents)
	// goes to a file from the start: set once, before anything logs.
	logs := filepath.Join(os.TempDir(), "bench-reboot")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	agentLog, err := os.Create(filepath.Join(logs, "agents.log"))
	if err != nil {
		return err
	}
	defer agentLog.Close()
	ctrl.SetLogger(zap.New(zap.WriteTo(agentLog)))
	l, err := lab.Up(ctx, lab.Options{Name: "bench-reboot", Prefix: "kxbr", Nodes: nodes,
		CRDDirs: []string{filepath.Join(root, "config", "crd", "bases")},
		Log:     func(f string, a ...any) { fmt.Printf("lab: "+f+"\n", a...) }})
	if err != nil {
		return err
	}
	defer func() {
		if derr := l.Down(context.WithoutCancel(ctx)); err == nil {
			err = derr
		}
	}()
	c, err := newClient(l)
	if err != nil {
		return err
	}
	cs, err := l.Clientset()
	if err != nil {
		return err
	}

	group := &rebootv1.RebootGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: rebootv1.RebootGroupSpec{
			MaxUnavailable:       ptr.To(intstr.FromInt32(int32(maxUnavailable))),
			SoakSeconds:          ptr.To(int32(soak / time.Second)),
			RebootTimeoutSeconds: 600,
		},
	}
	if err := c.Create(ctx, group); err != nil {
		return err
	}
	obs, err := rebootlab.Observe(ctx, cs, func(*corev1.Node) string { return "bench" }, map[string]int{"bench": maxUnavailable})
	if err != nil {
		return err
	}
	if manager == "" {
		manager = filepath.Join(l.BinDir, "manager")
	}
	m, err := l.StartManagerBinary(ctx, manager, "manager", "--controllers", "reboot")
	if err != nil {
		return err
	}
	fmt.Printf("Manager running (log %s)\n", m.Log)
	var procs []*lab.Process // the process agents, for their memory
	if agents == "light" {
		t0 := time.Now()
		la, err := startLightAgents(ctx, l, downtime)
		if err != nil {
			return err
		}
		defer la.stop()
		fmt.Printf("%d light reboot agents synced in %.1f s (log %s)\n", nodes, time.Since(t0).Seconds(), agentLog.Name())
	} else {
		for _, node := range l.Nodes {
			p, err := l.StartRebootAgent(ctx, node, l.RebootCommandArgs(node, downtime)...)
			if err != nil {
				return err
			}
			procs = append(procs, p)
		}
	}
	fmt.Printf("%d %s reboot agents running; simulated reboot T=%s, soak %s, maxUnavailable %d\n", nodes, agents, downtime, soak, maxUnavailable)

	loadBefore, err := stats.ReadAPIServerLoad(ctx, cs.RESTClient())
	if err != nil {
		return err
	}
	start := time.Now()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true"}}}`, rebootv1.AnnotationNeeded)
	for _, node := range l.Nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
		if err := c.Patch(ctx, n, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return err
		}
	}
	fmt.Printf("All %d nodes marked %s=true\n", nodes, rebootv1.AnnotationNeeded)
	lastReport := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, rolloutBound, true, func(context.Context) (bool, error) {
		done := 0
		for _, node := range l.Nodes {
			if rebootlab.Finished(obs.Node(node)) {
				done++
			}
		}
		if time.Since(lastReport) >= 10*time.Second {
			fmt.Printf("  %5.1f s: %d of %d rebooted\n", time.Since(start).Seconds(), done, nodes)
			lastReport = time.Now()
		}
		return done == nodes, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the rollout: %w", err)
	}
	total := time.Since(start)
	loadAfter, err := stats.ReadAPIServerLoad(ctx, cs.RESTClient())
	if err != nil {
		return err
	}

	// The drain of a node without pods is the controller's own overhead,
	// so the ideal counts it as zero.
	overhead := 100 * (total.Seconds() - ideal.Seconds()) / ideal.Seconds()

	once := 0
	for _, node := range l.Nodes {
		if obs.Reboots(node) == 1 {
			once++
		}
	}
	lat := decisionLatencies(obs, l.Nodes, soak)
	p50, p99 := stats.Percentile(lat, 50), stats.Percentile(lat, 99)
	maxSeen := obs.MaxUnavailable("bench")
	if v := obs.Violations(); len(v) > 0 {
		fmt.Printf("BUDGET EXCEEDED %d times, first: %s\n", len(v), v[0])
	}
	fmt.Printf("\nrollout: %.1f s for %d nodes; ideal ceil(%d/%d) x (drain 0 + T %s + soak %s) = %.1f s; overhead %.1f%%\n",
		total.Seconds(), nodes, nodes, maxUnavailable, downtime, soak, ideal.Seconds(), overhead)
	fmt.Printf("decision latency, soak over -> next node approved (s): p50 %.3f  p99 %.3f  over %d hand-overs\n", p50, p99, len(lat))
	printSteps(obs, l.Nodes, downtime, soak)
	if err := printControllerView(ctx, m.MetricsURL); err != nil {
		fmt.Printf("the controller's own view: %v\n", err)
	}
	fmt.Printf("rebooted exactly once: %d of %d; most unavailable at once: %d (budget %d)\n", once, nodes, maxSeen, maxUnavailable)
	printAgentMemory(procs)
	// Where the API server's time went during the rollout (every client:
	// the controller, the agents, the lab's kwok and this bench's watch).
	fmt.Println("API server during the rollout, by time spent:")
	for _, line := range loadAfter.Since(loadBefore).Top(12) {
		fmt.Println("  " + line)
	}
	printClientRequests(ctx, m.MetricsURL)
	fmt.Printf("reboot_overhead_pct=%.1f decision_p99_s=%.3f max_unavailable_seen=%d budget=%d nodes=%d rebooted_once=%d total_s=%.1f ideal_s=%.1f\n",
		overhead, p99, maxSeen, maxUnavailable, nodes, once, total.Seconds(), ideal.Seconds())
	if once != nodes || len(obs.Violations()) > 0 {
		return fmt.Errorf("the rollout was not correct: %d of %d rebooted once, %d budget violations", once, nodes, len(obs.Violations()))
	}
	return nil
}

// decisionLatencies pairs each approval after the first batch with the
// slot it took: the node whose release the observer saw last before it.
// The slot was free from that node's soak end (seen back Ready + soak).
func decisionLatencies(obs *rebootlab.Observer, nodes []string, soak time.Duration) []float64 {
	type step struct {
		node  string
		times rebootlab.Times
	}
	var steps []step
	for _, n := range nodes {
		steps = append(steps, step{n, obs.Times(n)})
	}
	var freed []step // by finish time
	for _, s := range steps {
		if !s.times.Finished.IsZero() {
			freed = append(freed, s)
		}
	}
	sort.Slice(freed, func(i, j int) bool { return freed[i].times.Finished.Before(freed[j].times.Finished) })
	used := map[string]bool{}
	var out []float64
	sort.Slice(steps, func(i, j int) bool { return steps[i].times.Approved.Before(steps[j].times.Approved) })
	for _, s := range steps {
		// The latest release at or before this approval not yet paired.
		var by *step
		for i := range freed {
			f := &freed[i]
			if f.times.Finished.After(s.times.Approved) {
				break
			}
			if !used[f.node] {
				by = f
			}
		}
		if by == nil {
			continue // first batch: no slot was freed for it
		}
		used[by.node] = true
		d := s.times.Approved.Sub(by.times.BackReady.Add(soak)).Seconds()
		out = append(out, max(d, 0))
	}
	return out
}

func newClient(l *lab.Lab) (client.Client, error) {
	cfg, err := l.RESTConfig()
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := rebootv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// printSteps says where a node's time between its approval and its release
// goes, as the outside watch saw it: medians and p99 of each step, the
// simulated reboot's T and the soak taken out.
func printSteps(obs *rebootlab.Observer, nodes []string, downtime, soak time.Duration) {
	var order, down, back, release []float64
	for _, n := range nodes {
		t := obs.Times(n)
		if t.Approved.IsZero() || t.Ordered.IsZero() || t.Down.IsZero() || t.BackReady.IsZero() || t.Finished.IsZero() {
			continue
		}
		order = append(order, t.Ordered.Sub(t.Approved).Seconds())
		down = append(down, t.Down.Sub(t.Ordered).Seconds())
		back = append(back, t.BackReady.Sub(t.Down).Seconds()-downtime.Seconds())
		release = append(release, t.Finished.Sub(t.BackReady).Seconds()-soak.Seconds())
	}
	step := func(name string, v []float64) string {
		return fmt.Sprintf("%s p50 %.3f p99 %.3f", name, stats.Percentile(v, 50), stats.Percentile(v, 99))
	}
	fmt.Printf("per node (s): %s; %s; %s; %s\n", step("approved->ordered (drain)", order), step("ordered->NotReady (agent)", down),
		step("NotReady->Ready minus T (lab)", back), step("Ready->released minus soak", release))
}

// interrupted ends on SIGINT or SIGTERM, so that an interrupted run still
// takes its lab down.
var interrupted, _ = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)

// printAgentMemory prints the peak resident memory (VmHWM) of the real
// reboot-agent processes still running at the end (none with light
// agents), and what it is made of.
func printAgentMemory(procs []*lab.Process) {
	var peaks, anon, files []float64
	for _, p := range procs {
		if m, running := stats.ReadMemory(p.PID()); running {
			peaks, anon, files = append(peaks, m.Peak), append(anon, m.Anon), append(files, m.File)
		}
	}
	if len(peaks) == 0 {
		return
	}
	fmt.Printf("reboot-agent processes running (%d): peak RSS p50 %.1f max %.1f MiB; now anonymous (heap, stacks) p50 %.1f MiB, mapped files (the binary) p50 %.1f MiB\n",
		len(peaks), stats.Percentile(peaks, 50), slices.Max(peaks), stats.Percentile(anon, 50), stats.Percentile(files, 50))
}
