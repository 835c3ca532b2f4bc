package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kubext/kubext/test/bench/stats"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/staticip"
)

// keepalivedBin, vrrpVersion and advert are -keepalived, -vrrp-version and
// -advert.
var (
	keepalivedBin string
	vrrpVersion   int
	advert        time.Duration
	// keepLogs is -keep-logs: where the lab's logs (keepalived's, the
	// servers') are copied before the lab goes down.
	keepLogs string
)

// keepalivedConf is one node's configuration: every node runs the same
// VRRP instance for the address, all BACKUP with nopreempt (a revived node
// does not take the address back), priorities by node order, so the
// comparison is with keepalived as it is usually run for a floating IP.
const keepalivedConf = `global_defs {
  router_id %[1]s
  vrrp_version %[2]d
}
vrrp_instance bench {
  state BACKUP
  nopreempt
  interface eth0
  virtual_router_id 51
  priority %[3]d
  advert_int %[4]s
  virtual_ipaddress {
    %[5]s/32 dev eth0
  }
}
`

type keepalivedBench struct {
	lab  *lab.Lab
	addr netip.Addr
	dir  string
	prio map[string]int
}

// validAdvert checks the advert interval against what keepalived accepts:
// VRRPv2 counts in whole seconds, VRRPv3 in centiseconds.
func validAdvert(version int, advert time.Duration) error {
	switch version {
	case 2:
		if advert < time.Second || advert%time.Second != 0 || advert > 255*time.Second {
			return fmt.Errorf("VRRPv2 -advert must be whole seconds from 1s to 255s, not %s", advert)
		}
	case 3:
		if advert < 10*time.Millisecond || advert%(10*time.Millisecond) != 0 || advert > 40950*time.Millisecond {
			return fmt.Errorf("VRRPv3 -advert must be a multiple of 10ms from 10ms to 40.95s, not %s", advert)
		}
	default:
		return fmt.Errorf("-vrrp-version must be 2 or 3, not %d", version)
	}
	return nil
}

func runKeepalived(trials int) (err error) {
	ctx := context.Background()
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root: keepalived runs in network namespaces")
	}
	if err := validAdvert(vrrpVersion, advert); err != nil {
		return err
	}
	if _, err := os.Stat(keepalivedBin); err != nil {
		return fmt.Errorf("keepalived: %w (apt-get install keepalived, or -keepalived PATH)", err)
	}
	l, err := lab.Up(ctx, lab.Options{Name: "bench-failover-keepalived", Prefix: "kxk", Nodes: 3, Network: true,
		Log: func(f string, a ...any) { fmt.Printf("lab: "+f+"\n", a...) }})
	if err != nil {
		return err
	}
	defer func() {
		if keepLogs != "" {
			if cerr := os.CopyFS(keepLogs, os.DirFS(filepath.Join(l.Dir, "logs"))); cerr != nil {
				fmt.Fprintln(os.Stderr, "bench-failover: keeping the logs:", cerr)
			}
		}
		if derr := l.Down(ctx); err == nil {
			err = derr
		}
	}()
	k := &keepalivedBench{lab: l, addr: staticip.Nth(l.Net.Subnet, 100), dir: filepath.Join(l.Dir, "keepalived"), prio: map[string]int{}}
	if err := os.MkdirAll(k.dir, 0o755); err != nil {
		return err
	}
	for i, n := range l.Nodes {
		k.prio[n] = 150 - i
		if err := k.start(n); err != nil {
			return err
		}
	}
	out, _ := execOutput(keepalivedBin, "--version")
	fmt.Printf("Settings: %s, VRRPv%d, advert_int %s, %d nodes BACKUP + nopreempt; probe every 50 ms, 100 ms timeout\n",
		strings.SplitN(out, "\n", 2)[0], vrrpVersion, advert, len(l.Nodes))

	splits, err := staticip.NewSplitDetector(l.Net, k.addr)
	if err != nil {
		return err
	}
	downtimes, flaps, err := k.failovers(ctx, trials)
	partFields := ""
	if err == nil && partitionFor > 0 {
		var node string
		if node, err = k.holder(30 * time.Second); err == nil {
			var r partitionResult
			if r, err = partition(l, splits, k.addr, node); err == nil {
				fmt.Println(r)
				partFields = r.fields()
			}
		}
	}
	if _, derr := splits.Stop(); derr != nil && err == nil {
		err = derr
	}
	if err != nil {
		return err
	}
	fmt.Println(splits.Report())
	fmt.Printf("\nfailover downtime (s): p50 %.2f  p99 %.2f  max %.2f  over %d trials; took the address back after the revive in %d\n",
		stats.Percentile(downtimes, 50), stats.Percentile(downtimes, 99), slices.Max(downtimes), len(downtimes), flaps)
	fmt.Printf("time with two nodes answering: %d ms\n", splits.SplitTime().Milliseconds())
	fmt.Printf("peer=keepalived vrrp_version=%d advert_s=%g failover_p50_s=%.2f failover_p99_s=%.2f failover_max_s=%.2f trials=%d splits=%d split_brain_ms=%d flaps=%d%s\n",
		vrrpVersion, advert.Seconds(), stats.Percentile(downtimes, 50), stats.Percentile(downtimes, 99), slices.Max(downtimes),
		len(downtimes), splits.Episodes(), splits.SplitTime().Milliseconds(), flaps, partFields)
	return nil
}

// start runs the node's keepalived and a server that answers the probe
// with the node's name, both inside the node's namespace, so that the
// lab's KillNode kills them as it kills a node's agent.
func (k *keepalivedBench) start(node string) error {
	ns := k.lab.Net.NodeNamespace(node)
	conf := filepath.Join(k.dir, node+".conf")
	secs := strconv.FormatFloat(advert.Seconds(), 'f', -1, 64)
	if err := os.WriteFile(conf, fmt.Appendf(nil, keepalivedConf, node, vrrpVersion, k.prio[node], secs, k.addr), 0o644); err != nil {
		return err
	}
	if _, err := k.lab.Start("server-"+node, ns, filepath.Join(k.lab.BinDir, "lab"),
		[]string{"podserver", "--listen", ":" + strconv.Itoa(lab.PodServerPort), "--reply", node}); err != nil {
		return err
	}
	// A node that comes back has an empty /run: the pid files of the
	// killed keepalived would make the new one refuse to start ("daemon
	// is already running") while its unreaped processes linger.
	pid, vrrpPID := filepath.Join(k.dir, node+".pid"), filepath.Join(k.dir, node+"-vrrp.pid")
	for _, f := range []string{pid, vrrpPID} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	p, err := k.lab.Start("keepalived-"+node, ns, keepalivedBin, []string{"--dont-fork", "--log-console", "--log-detail",
		"--no-syslog", "--vrrp", "--use-file", conf, "--pid", pid, "--vrrp_pid", vrrpPID})
	if err != nil {
		return err
	}
	// keepalived exits at once when it refuses to start: a harness that
	// ran without it would measure nothing.
	time.Sleep(200 * time.Millisecond)
	if !p.Running() {
		return fmt.Errorf("keepalived on %s exited at start; see %s", node, p.Log)
	}
	return nil
}

// holder waits until some node answers for the address.
func (k *keepalivedBench) holder(timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		who, err := staticip.AskFrom(k.lab.Net.ClientNamespace(), k.addr, 100*time.Millisecond)
		if err == nil && who != "" {
			return who, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("nobody answered for %s within %s (last error %v)", k.addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// failovers kills the master's node trials times, as the kubext bench
// kills the holder's, and measures the client's outage. It then revives
// the node (after -restart-after, keepalived starts again) and watches
// whether the revived node takes the address back.
func (k *keepalivedBench) failovers(ctx context.Context, trials int) (downtimes []float64, flaps int, err error) {
	settle := max(3*time.Second, 5*advert)
	for i := range trials {
		node, err := k.holder(30 * time.Second)
		if err != nil {
			return nil, 0, fmt.Errorf("trial %d: %w", i+1, err)
		}
		probe := startProbe(k.lab.Net.ClientNamespace(), k.addr)
		// A random phase against the adverts, as a real failure has.
		time.Sleep(300*time.Millisecond + rand.N(advert))
		if err := k.lab.KillNode(ctx, node); err != nil {
			return nil, 0, err
		}
		killed := time.Now()
		down, by, _, err := probe.outage(killed, node, 30*time.Second)
		if err != nil {
			return nil, 0, fmt.Errorf("trial %d: %w", i+1, err)
		}
		downtimes = append(downtimes, down.Seconds())
		fmt.Printf("trial %2d: killed %s at %s: %s answered after %.2f s of silence\n", i+1, node,
			killed.UTC().Format("15:04:05.000"), by, down.Seconds())
		if err := k.lab.ReviveNode(ctx, node); err != nil {
			return nil, 0, err
		}
		fmt.Printf("          revived %s at %s\n", node, time.Now().UTC().Format("15:04:05.000"))
		time.Sleep(restartAfter)
		if err := k.start(node); err != nil {
			return nil, 0, err
		}
		watch := startProbe(k.lab.Net.ClientNamespace(), k.addr)
		time.Sleep(settle)
		answers := watch.drain()
		if slices.ContainsFunc(answers, func(a answer) bool { return a.who == node }) {
			flaps++
			fmt.Printf("          %s answered the client again within %s of its restart\n", node, settle)
		}
	}
	return downtimes, flaps, nil
}

func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
