// Command apps is `make bench-apps`: the application operators at scale.
// On a lab of simulated nodes it creates 1,000 PulsarConsumers and 200 Redis
// objects at once and measures
//   - converge_s: the time until every one of them is converged (its owned
//     Deployment or StatefulSet runs what the spec asks and the status
//     reports it; see converged.go for the exact rules);
//   - writes_per_resync: the API writes a freshly started manager makes
//     while it re-reconciles every converged object, per object (target 0);
//   - reconcile_p50_ms / reconcile_p99_ms: from a spec change (kubectl scale
//     of a PulsarConsumer, the seed's merge patch of a Redis's size)
//     returning to the owned Deployment or StatefulSet showing the new
//     replica count, as seen by a watch (target p99 ≤ 100 ms).
//
// The last line of its output is machine-readable.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kubext/kubext/test/bench/stats"
	"github.com/kubext/kubext/test/lab"
)

// podsPerNode is what a lab node holds (test/lab's node capacity).
const podsPerNode = 250

type config struct {
	consumers int
	redis     int
	redisSize int
	nodes     int
	workers   int
	changes   int
	// window is the least time the restarted manager is watched, so that
	// the Redis controller's own 30 s re-observation falls in it too.
	window time.Duration
}

func main() {
	var cfg config
	flag.IntVar(&cfg.consumers, "consumers", 1000, "PulsarConsumers to create (1 replica each)")
	flag.IntVar(&cfg.redis, "redis", 200, "Redis objects to create")
	flag.IntVar(&cfg.redisSize, "redis-size", 2, "members of each Redis (one primary, size-1 replicas)")
	flag.IntVar(&cfg.nodes, "nodes", 8, fmt.Sprintf("simulated nodes, %d pods each", podsPerNode))
	flag.IntVar(&cfg.workers, "workers", 20, "objects created concurrently")
	flag.IntVar(&cfg.changes, "changes", 200, "spec changes whose reconcile latency is measured, half of each kind")
	flag.DurationVar(&cfg.window, "resync-window", 35*time.Second, "least time the writes of the restarted manager are counted")
	flag.Parse()
	// The watches' own errors only; the progress is printed here.
	ctrllog.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench-apps:", err)
		os.Exit(1)
	}
}

func run(cfg config) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	// Every scale-up adds a pod.
	if pods := cfg.consumers + cfg.redis*cfg.redisSize + cfg.changes; pods > cfg.nodes*podsPerNode {
		return fmt.Errorf("%d pods do not fit on %d nodes of %d pods: use -nodes %d", pods, cfg.nodes, podsPerNode,
			(pods+podsPerNode-1)/podsPerNode)
	}
	root, err := lab.RepoRoot()
	if err != nil {
		return err
	}
	l, err := lab.Up(ctx, lab.Options{Name: "bench-apps", Prefix: "kxba", Nodes: cfg.nodes,
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
	watchCtx, stopWatches := context.WithCancel(ctx)
	// Before the lab goes (deferred calls run last first), so that the
	// watches do not complain of the API server leaving.
	defer stopWatches()
	b, err := newBench(watchCtx, l, root, cfg)
	if err != nil {
		return err
	}
	managerStart := time.Now()
	m, err := l.StartManager(ctx, "manager", managerArgs...)
	if err != nil {
		return err
	}
	fmt.Printf("Manager running %v (log %s)\n", managerArgs, m.Log)
	holder, err := b.leases.waitHolder(ctx, "", time.Minute)
	if err != nil {
		return err
	}
	objects := cfg.consumers + cfg.redis

	fmt.Printf("\n1. Creating %d PulsarConsumers (1 replica) and %d Redis (size %d) in namespace %s, %d at a time\n",
		cfg.consumers, cfg.redis, cfg.redisSize, namespace, cfg.workers)
	start := time.Now()
	if err := b.createAll(ctx, cfg.workers); err != nil {
		return err
	}
	fmt.Printf("   all created in %.1f s\n", time.Since(start).Seconds())
	conv, err := b.waitConverged(ctx, start, 30*time.Minute)
	if err != nil {
		return err
	}
	fmt.Printf("   every object reconciled (owned object created, observedGeneration current) after %.1f s\n", conv.reconciled.Seconds())
	fmt.Printf("   every owned object running (as kube-controller-manager reports) after %.1f s\n", conv.running.Seconds())
	fmt.Printf("   every object converged after %.1f s\n", conv.converged.Seconds())
	convergeWrites, err := b.countWrites(ctx, m, holder, managerStart)
	if err != nil {
		return err
	}
	fmt.Printf("   the manager's writes to get there: %s (%.2f per object)\n", convergeWrites, convergeWrites.objects()/float64(objects))

	fmt.Printf("\n2. Restarting the manager: a fresh cache lists and reconciles all %d converged objects\n", objects)
	m, rs, err := b.resync(ctx, m, holder, cfg.window)
	if err != nil {
		return err
	}
	fmt.Printf("   every object reconciled again %.1f s after the start (%d PulsarConsumer, %d Redis reconciles in %.1f s)\n",
		rs.reconciled.Seconds(), rs.reconciles["pulsarconsumer"], rs.reconciles["redis"], rs.window.Seconds())
	fmt.Printf("   the manager's writes: %s\n", rs.writes)
	writesPerResync := rs.writes.objects() / float64(objects)

	fmt.Printf("\n3. %d spec changes, one at a time: PulsarConsumer replicas 1 -> 2 through the scale subresource,\n"+
		"   Redis size %d -> %d by merge patch; latency from the patch returning to the watch seeing the new replicas\n",
		cfg.changes, cfg.redisSize, cfg.redisSize+1)
	lat, err := b.latencies(ctx, m, cfg.changes)
	if err != nil {
		return err
	}
	reconv, err := b.waitConverged(ctx, time.Now(), 10*time.Minute)
	if err != nil {
		return err
	}
	fmt.Printf("   every object converged again, scaled, %.1f s after the last change\n", reconv.converged.Seconds())

	all := append(append([]float64{}, lat.consumers...), lat.redis...)
	fmt.Printf("\nSummary (%d objects on %d simulated nodes)\n", objects, cfg.nodes)
	fmt.Printf("  converge: all reconciled %.1f s, all owned objects running %.1f s, all converged %.1f s\n",
		conv.reconciled.Seconds(), conv.running.Seconds(), conv.converged.Seconds())
	fmt.Printf("  writes per object on a resync: %.3f (%.0f object writes; %d of the leader election and %d Events left out)\n",
		writesPerResync, rs.writes.objects(), rs.writes.lease, rs.writes.events)
	fmt.Printf("  reconcile latency (ms):  p50 %5.1f  p99 %5.1f  max %5.1f  over %d changes\n",
		stats.Percentile(all, 50), stats.Percentile(all, 99), stats.Percentile(all, 100), len(all))
	fmt.Printf("    PulsarConsumer -> Deployment:  p50 %5.1f  p99 %5.1f  over %d\n",
		stats.Percentile(lat.consumers, 50), stats.Percentile(lat.consumers, 99), len(lat.consumers))
	fmt.Printf("    Redis -> StatefulSet:          p50 %5.1f  p99 %5.1f  over %d\n",
		stats.Percentile(lat.redis, 50), stats.Percentile(lat.redis, 99), len(lat.redis))
	fmt.Printf("    the manager's mean queue wait / reconcile time meanwhile: PulsarConsumer %.1f / %.1f ms, Redis %.1f / %.1f ms\n",
		lat.queueMs["pulsarconsumer"], lat.reconcileMs["pulsarconsumer"], lat.queueMs["redis"], lat.reconcileMs["redis"])
	fmt.Printf("objects=%d converge_s=%.1f writes_per_resync=%.3g reconcile_p99_ms=%.1f reconcile_p50_ms=%.1f reconciled_s=%.1f running_s=%.1f resync_s=%.1f changes=%d nodes=%d\n",
		objects, conv.converged.Seconds(), writesPerResync, stats.Percentile(all, 99), stats.Percentile(all, 50),
		conv.reconciled.Seconds(), conv.running.Seconds(), rs.reconciled.Seconds(), len(all), cfg.nodes)
	return nil
}
