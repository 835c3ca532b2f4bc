// Command failover is `make bench-failover`: it measures, on the lab, how
// long a client probing a static IP every 50 ms goes unanswered when the
// holder's node dies with a standby present, over many trials, and how long
// an IP takes to become Ready once its pod is. The last line of its output
// is machine-readable.
//
// With -provider aws the IPs belong to an aws pool and the lab models a VPC
// (test/lab/vpc.go): the manager moves the address in an EC2 endpoint that
// adds -ec2-latency to every call, and the client reaches only the node
// whose ENI EC2 says holds the address. It also reports the EC2 calls per
// failover and kubext's own time: from the controller declaring the node
// lost to the client's first answer, minus the EC2 calls' latency.
//
// The split detector (test/staticip) watches the address through every
// trial: split_brain_ms is how long two nodes answered for it at once.
// After the failovers, -stall freezes the lab's kube-apiserver (and then
// etcd) for that long with the client probing, and reports the longest
// outage the client saw during the stall and -stall-watch after it
// (stall_outage_s, stall_etcd_outage_s) and whether the address moved.
// Before the stalls, -partition isolates the holder's node from all but
// the client (its link stays up) and reports the client's outage and the
// time two nodes answered meanwhile (partition_outage_s,
// partition_split_ms).
//
// With -peer keepalived it measures keepalived instead (keepalived.go):
// the same lab network, probe, kill and split detector, one VRRP instance
// per node namespace for the address.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/bench/stats"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/staticip"
)

func main() {
	trials := flag.Int("trials", 20, "node failures to measure")
	attachTrials := flag.Int("attach-trials", 20, "attachments to measure")
	leaseDuration := flag.Duration("lease-duration", 2*time.Second, "ip-agent --lease-duration")
	renew := flag.Duration("renew-interval", 500*time.Millisecond, "ip-agent --renew-interval")
	provider := flag.String("provider", "l2", "the pool's provider: l2, or aws (the lab's VPC model)")
	ec2Latency := flag.Duration("ec2-latency", 300*time.Millisecond, "with -provider aws: latency of every EC2 call")
	flag.BoolVar(&awsPublic, "aws-public", false, "with -provider aws: public mode, Elastic IPs from a BYOIP pool of the VPC model")
	flag.DurationVar(&probeEvery, "probe-every", 50*time.Millisecond, "how often the client asks the address; each ask waits 100 ms at most (with -provider aws, asks overlap)")
	overlap := flag.Bool("overlap-asks", false, "the client's asks overlap with -provider l2 too (they always do with aws): an ask that timed out does not delay the next, so figures below ~0.3 s are not rounded up by up to 100 ms; the keepalived anchors of 2026-11-23 were measured without")
	flag.DurationVar(&stallFor, "stall", 5*time.Second, "after the failovers, freeze kube-apiserver, then etcd, this long with the client probing (0: skip)")
	flag.DurationVar(&stallWatch, "stall-watch", 10*time.Second, "how long the client keeps probing after a stall ends")
	flag.DurationVar(&restartAfter, "restart-after", 0, "how long a revived node stays on the network before its agent (or keepalived) restarts: a node that does not fence answers for its old address meanwhile")
	peer := flag.String("peer", "kubext", "what holds the address: kubext, or keepalived (one VRRP instance per node)")
	flag.StringVar(&keepalivedBin, "keepalived", "/usr/sbin/keepalived", "with -peer keepalived: the keepalived binary")
	flag.IntVar(&vrrpVersion, "vrrp-version", 2, "with -peer keepalived: VRRP version, 2 or 3")
	flag.DurationVar(&advert, "advert", time.Second, "with -peer keepalived: advert_int (VRRPv2: whole seconds; VRRPv3: down to 10ms)")
	flag.DurationVar(&partitionFor, "partition", 5*time.Second, "after the failovers, isolate the holder's node from all but the client this long (0: skip)")
	flag.DurationVar(&partitionWatch, "partition-watch", 3*time.Second, "how long the client keeps probing after the partition heals")
	flag.StringVar(&extraAgentArgs, "agent-args", "", "more ip-agent flags, space-separated (e.g. a witness timing profile)")
	flag.StringVar(&failover, "failover", "Witness", "the pool's spec.failover: Witness (the default: the agents vouch for each other; docs/design/failover.md), or Lease")
	flag.StringVar(&keepLogs, "keep-logs", "", "copy the lab's logs (the agents' and manager's, or keepalived's) to this new directory before the lab goes down")
	flag.Parse()
	if *peer == "keepalived" {
		if err := runKeepalived(*trials); err != nil {
			fmt.Fprintln(os.Stderr, "bench-failover:", err)
			os.Exit(1)
		}
		return
	}
	if *peer != "kubext" {
		fmt.Fprintln(os.Stderr, "bench-failover: -peer must be kubext or keepalived")
		os.Exit(2)
	}
	if *provider != "l2" && *provider != "aws" {
		fmt.Fprintln(os.Stderr, "bench-failover: -provider must be l2 or aws")
		os.Exit(2)
	}
	awsMode = *provider == "aws"
	overlapAsks = awsMode || *overlap
	ec2Lat = *ec2Latency
	if err := run(*trials, *attachTrials, *leaseDuration, *renew); err != nil {
		fmt.Fprintln(os.Stderr, "bench-failover:", err)
		os.Exit(1)
	}
}

// ec2Actions are the EC2 actions the aws provider calls.
var ec2Actions = []string{"DescribeInstances", "DescribeSubnets", "DescribeNetworkInterfaces", "DescribeAddresses",
	"AssignPrivateIpAddresses", "UnassignPrivateIpAddresses", "AllocateAddress", "AssociateAddress", "DisassociateAddress", "ReleaseAddress"}

// awsMode, awsPublic and ec2Lat are -provider aws, -aws-public and
// -ec2-latency; probeEvery is -probe-every.
var (
	awsMode, awsPublic bool
	ec2Lat, probeEvery time.Duration
	// overlapAsks is -overlap-asks, always on with -provider aws.
	overlapAsks bool
)

// The BYOIP pool of -aws-public: documentation addresses off the lab's
// subnet (publicRange).
const benchPublicPool = "ipv4pool-ec2-0123456789abcdef0"

// publicRange is the BYOIP range of -aws-public: the top of a
// documentation range that is not the lab's subnet (the top of the pod
// subnet, when it is that one: the VPC model routes the range past it).
func publicRange(l *lab.Lab) netip.Prefix {
	for _, p := range []string{"198.51.100.240/28", "203.0.113.240/28", "192.0.2.240/28"} {
		if r := netip.MustParsePrefix(p); !r.Overlaps(l.Net.Subnet) {
			return r
		}
	}
	return netip.Prefix{}
}

// stallFor, stallWatch and restartAfter are -stall, -stall-watch and
// -restart-after.
var stallFor, stallWatch, restartAfter time.Duration

// failover is -failover: the pool's spec.failover; extraAgentArgs is
// -agent-args.
var failover, extraAgentArgs string

type bench struct {
	lab *lab.Lab
	c   client.Client
	// wc watches the IP through each aws trial (ipTimeline).
	wc     client.WithWatch
	agents []string
	// manager runs with managerArgs; it exits when it loses its leader
	// Lease (a stall), and is started again as the kubelet would.
	manager     *lab.Manager
	managerArgs []string
	// vpc is the lab's VPC model (aws only).
	vpc *lab.VPC
	// ec2Calls, mutating and own are per failover (aws only): EC2 calls,
	// mutating EC2 calls, and kubext's own seconds; ownBefore, ownBetween
	// and ownAfter split own: from NodeLost to the first EC2 call the
	// answer waited for, between those calls, and from the last one's
	// return to the answer.
	ec2Calls, mutating                   []int
	own, ownBefore, ownBetween, ownAfter []float64
	// agentProcs is each node's latest ip-agent process, for their
	// memory at the end (agentPeakRSS).
	agentProcs map[string]*lab.Process
}

func run(trials, attachTrials int, leaseDuration, renew time.Duration) (err error) {
	ctx := context.Background()
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root: the data plane runs in network namespaces")
	}
	l, err := lab.Up(ctx, lab.Options{Name: "bench-failover", Prefix: "kxb", Nodes: 3, Network: true,
		CRDDirs: []string{"config/crd/bases"}, Log: func(f string, a ...any) { fmt.Printf("lab: "+f+"\n", a...) }})
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
	b := &bench{lab: l}
	if b.c, err = staticip.NewClient(l); err != nil {
		return err
	}
	if awsMode {
		cfg, err := l.RESTConfig()
		if err != nil {
			return err
		}
		if b.wc, err = client.NewWithWatch(cfg, client.Options{Scheme: b.c.Scheme()}); err != nil {
			return err
		}
	}
	pool := netip.PrefixFrom(staticip.Nth(l.Net.Subnet, 96), 28)
	managerArgs := []string{"--controllers=ip,ippool"}
	if awsMode {
		o := lab.VPCOptions{Addresses: pool, Latency: ec2Lat}
		if awsPublic {
			o.PublicPool, o.PublicRange = benchPublicPool, publicRange(l)
		}
		if b.vpc, err = l.StartVPC(ctx, o); err != nil {
			return err
		}
		defer func() { _ = b.vpc.Stop() }()
		// The manager's credentials come from the SDK's default chain;
		// the lab's EC2 does not check signatures.
		for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "AKIDLAB", "AWS_SECRET_ACCESS_KEY": "lab", "AWS_EC2_METADATA_DISABLED": "true"} {
			if err := os.Setenv(k, v); err != nil {
				return err
			}
		}
		managerArgs = append(managerArgs, "--aws-provider", "--aws-region=lab-1", "--aws-endpoint="+b.vpc.Endpoint)
	}
	if b.manager, err = l.StartManager(ctx, "manager", managerArgs...); err != nil {
		return err
	}
	b.managerArgs = managerArgs
	agentArgs := []string{"--lease-duration", leaseDuration.String(), "--renew-interval", renew.String()}
	witnessArgs, err := l.WitnessArgs()
	if err != nil {
		return err
	}
	agentArgs = append(append(agentArgs, witnessArgs...), strings.Fields(extraAgentArgs)...)
	b.agents = agentArgs
	b.agentProcs = map[string]*lab.Process{}
	for _, n := range l.Nodes {
		if b.agentProcs[n], err = l.StartIPAgent(ctx, n, agentArgs...); err != nil {
			return err
		}
	}
	pods, err := l.StartPodNetwork(ctx)
	if err != nil {
		return err
	}
	defer pods.Stop()

	spec := ipv1.IPPoolSpec{Addresses: []string{pool.String()}, Provider: ipv1.ProviderL2, Failover: ipv1.FailoverMode(failover),
		// The bench's pods run in default; no other pod may claim.
		Claimants: &ipv1.PoolClaimants{Namespaces: []string{"default"}}}
	addr := staticip.Nth(l.Net.Subnet, 100)
	if awsMode {
		spec.Provider = ipv1.ProviderAWS
	}
	if awsPublic {
		spec.Addresses, spec.AWS = []string{publicRange(l).String()}, &ipv1.AWSProvider{PublicIPv4Pool: benchPublicPool}
		addr = staticip.Nth(publicRange(l), 4)
	}
	if err := b.c.Create(ctx, &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Spec: spec}); err != nil {
		return err
	}
	fmt.Printf("Settings: pool failover %s; ip-agent --lease-duration=%s --renew-interval=%s %s %s; probe every %s, 100 ms timeout, asks overlap: %t\n",
		failover, leaseDuration, renew, strings.Join(witnessArgs[:2], "="), extraAgentArgs, probeEvery, overlapAsks)

	if err := b.c.Create(ctx, &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: ipv1.IPSpec{Address: addr.String()}}); err != nil {
		return err
	}
	if err := b.c.Create(ctx, staticip.Deployment("bench", "bench", 2)); err != nil {
		return err
	}
	// Two nodes answering at once during a failover would make its
	// downtime meaningless: the split detector watches every trial. In
	// public mode the nodes answer on the Elastic IP's private IP (the
	// VPC's 1:1 NAT turns it into the Elastic IP), which a move within the
	// subnet keeps.
	onLink := addr
	if awsPublic {
		ip, err := staticip.WaitIP(ctx, b.c, "bench", 2*time.Minute, func(ip *ipv1.IP) bool {
			return staticip.Ready(ip) && ip.Status.AWS != nil && ip.Status.AWS.PrivateIP != ""
		})
		if err != nil {
			return err
		}
		if onLink, err = netip.ParseAddr(ip.Status.AWS.PrivateIP); err != nil {
			return err
		}
		fmt.Printf("Elastic IP %s, associated with private IP %s\n", addr, onLink)
	}
	splits, err := staticip.NewSplitDetector(l.Net, onLink)
	if err != nil {
		return err
	}
	downtimes, err := b.failovers(ctx, trials, addr)
	var part *partitionResult
	if err == nil && partitionFor > 0 {
		var ip *ipv1.IP
		if ip, err = staticip.WaitIP(ctx, b.c, "bench", 2*time.Minute, func(ip *ipv1.IP) bool { return staticip.Ready(ip) && len(ip.Status.Standbys) > 0 }); err == nil {
			if _, err = staticip.AskUntil(l.Net.ClientNamespace(), addr, staticip.PodName(ip.Status.Pod), 30*time.Second); err == nil {
				var r partitionResult
				r, err = partition(l, splits, addr, ip.Status.Node)
				part = &r
			}
		}
	}
	stalls := map[string]stallResult{}
	if err == nil && stallFor > 0 {
		for _, comp := range []string{lab.ComponentAPIServer, lab.ComponentEtcd} {
			r, serr := b.stall(ctx, addr, comp)
			if serr != nil {
				err = fmt.Errorf("stall of %s: %w", comp, serr)
				break
			}
			stalls[comp] = r
		}
	}
	if _, derr := splits.Stop(); derr != nil && err == nil {
		err = derr
	}
	if err != nil {
		return err
	}
	fmt.Println(splits.Report())
	attaches, err := b.attachments(ctx, attachTrials)
	if err != nil {
		return err
	}
	fmt.Printf("\nfailover downtime (s): p50 %.2f  p99 %.2f  max %.2f  over %d trials\n",
		stats.Percentile(downtimes, 50), stats.Percentile(downtimes, 99), slices.Max(downtimes), len(downtimes))
	fmt.Printf("attach latency, pod Ready -> IP Ready (s): p50 %.2f  p99 %.2f  max %.2f  over %d trials\n",
		stats.Percentile(attaches, 50), stats.Percentile(attaches, 99), slices.Max(attaches), len(attaches))
	for _, comp := range []string{lab.ComponentAPIServer, lab.ComponentEtcd} {
		if r, ok := stalls[comp]; ok {
			fmt.Printf("%s frozen %s: %s\n", comp, stallFor, r)
		}
	}
	partFields := ""
	if part != nil {
		fmt.Println(part)
		partFields = part.fields()
	}
	if rate, err := b.leaseWrites(ctx, 15*time.Second); err == nil {
		partFields += fmt.Sprintf(" lease_writes_per_node_s=%.2f", rate)
	} else {
		return err
	}
	fmt.Printf("time with two nodes answering: %d ms\n", splits.SplitTime().Milliseconds())
	agentRSS := b.agentPeakRSS()
	fmt.Printf("failover_p50_s=%.2f failover_p99_s=%.2f failover_max_s=%.2f attach_p50_s=%.2f attach_p99_s=%.2f trials=%d lease_s=%g renew_s=%g splits=%d split_brain_ms=%d%s%s agent_rss_mib=%.1f\n",
		stats.Percentile(downtimes, 50), stats.Percentile(downtimes, 99), slices.Max(downtimes), stats.Percentile(attaches, 50), stats.Percentile(attaches, 99),
		len(downtimes), leaseDuration.Seconds(), renew.Seconds(), splits.Episodes(), splits.SplitTime().Milliseconds(), stallFields(stalls), partFields, agentRSS)
	if awsMode {
		calls, muts := ints(b.ec2Calls), ints(b.mutating)
		fmt.Printf("EC2 calls per failover: p50 %.0f  max %.0f (mutating: p50 %.0f  max %.0f) at %s per call\n",
			stats.Percentile(calls, 50), slices.Max(calls), stats.Percentile(muts, 50), slices.Max(muts), ec2Lat)
		fmt.Printf("kubext's own time per failover, NodeLost -> first answer minus the latency of the EC2 calls in between (s): p50 %.3f  p99 %.3f  max %.3f\n",
			stats.Percentile(b.own, 50), stats.Percentile(b.own, 99), slices.Max(b.own))
		if len(b.ownBefore) > 0 {
			fmt.Printf("  of which (s): NodeLost -> first call p50 %.3f p99 %.3f; between calls p50 %.3f p99 %.3f; last call -> answer p50 %.3f p99 %.3f (includes the probe's interval, %s)\n",
				stats.Percentile(b.ownBefore, 50), stats.Percentile(b.ownBefore, 99), stats.Percentile(b.ownBetween, 50), stats.Percentile(b.ownBetween, 99),
				stats.Percentile(b.ownAfter, 50), stats.Percentile(b.ownAfter, 99), probeEvery)
		}
		mode := "private"
		if awsPublic {
			mode = "public"
		}
		fmt.Printf("provider=aws aws_mode=%s ec2_calls_per_failover=%.0f ec2_mutating_per_failover=%.0f ec2_latency_s=%g failover_p50_s=%.2f failover_p99_s=%.2f kubext_own_p50_s=%.3f kubext_own_p99_s=%.3f trials=%d splits=%d split_brain_ms=%d%s%s\n",
			mode, stats.Percentile(calls, 50), stats.Percentile(muts, 50), ec2Lat.Seconds(), stats.Percentile(downtimes, 50), stats.Percentile(downtimes, 99),
			stats.Percentile(b.own, 50), stats.Percentile(b.own, 99), len(downtimes), splits.Episodes(), splits.SplitTime().Milliseconds(), stallFields(stalls), partFields)
	}
	return nil
}

// ipTimeline is when the bench's watch saw the IP's status change during a
// trial: status.node, status.attachedNode and status.aws.node.
type ipTimeline struct {
	mu     sync.Mutex
	events []ipEvent
	stop   func()
}

type ipEvent struct {
	at                      time.Time
	node, attached, awsNode string
}

func watchIP(ctx context.Context, wc client.WithWatch, name string) (*ipTimeline, error) {
	w, err := wc.Watch(ctx, &ipv1.IPList{}, client.MatchingFields{"metadata.name": name})
	if err != nil {
		return nil, err
	}
	tl := &ipTimeline{stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			ip, ok := ev.Object.(*ipv1.IP)
			if !ok {
				continue
			}
			e := ipEvent{at: time.Now(), node: ip.Status.Node, attached: ip.Status.AttachedNode}
			if ip.Status.AWS != nil {
				e.awsNode = ip.Status.AWS.Node
			}
			tl.mu.Lock()
			tl.events = append(tl.events, e)
			tl.mu.Unlock()
		}
	}()
	return tl, nil
}

// describe says when, after lost, the watch first saw the IP placed on
// another node than old (status.node), claimed there (attachedNode) and
// routed there by EC2 as verified (status.aws.node).
func (tl *ipTimeline) describe(lost time.Time, old string) string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var placed, claimed, routed time.Time
	target := ""
	for _, e := range tl.events {
		if e.node != "" && e.node != old && placed.IsZero() {
			placed, target = e.at, e.node
		}
		if target != "" && e.attached == target && claimed.IsZero() {
			claimed = e.at
		}
		if target != "" && e.awsNode == target && routed.IsZero() {
			routed = e.at
		}
	}
	ms := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%.3f", t.Sub(lost).Seconds())
	}
	return fmt.Sprintf("seen after NodeLost (s): placed %s, claimed %s, EC2 verified %s", ms(placed), ms(claimed), ms(routed))
}

// splitOwn splits kubext's own time of one failover: NodeLost to the
// first EC2 call the answer waited for, the gaps between those calls, and
// the last one's return to the answer; it records the three and describes
// them.
func (b *bench) splitOwn(lost, answered time.Time) string {
	log := b.vpc.EC2.CallLog(lost, answered)
	if len(log) == 0 {
		return "no EC2 call before the answer"
	}
	before := log[0].Start.Sub(lost)
	var between time.Duration
	actions := []string{log[0].Action}
	for i := 1; i < len(log); i++ {
		between += max(log[i].Start.Sub(log[i-1].Start.Add(ec2Lat)), 0)
		actions = append(actions, log[i].Action)
	}
	after := answered.Sub(log[len(log)-1].Start.Add(ec2Lat))
	b.ownBefore, b.ownBetween, b.ownAfter = append(b.ownBefore, before.Seconds()), append(b.ownBetween, between.Seconds()), append(b.ownAfter, after.Seconds())
	return fmt.Sprintf("NodeLost -> %s %.3f s, between calls %.3f s, last call -> answer %.3f s", strings.Join(actions, ", "), before.Seconds(), between.Seconds(), after.Seconds())
}

func ints(v []int) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// nodeLostAt is when the controller last declared a node lost for IP name
// (its NodeLost Event, or the last of the Event's series).
func (b *bench) nodeLostAt(ctx context.Context, name string) (time.Time, error) {
	list := &eventsv1.EventList{}
	if err := b.c.List(ctx, list); err != nil {
		return time.Time{}, err
	}
	var last time.Time
	for _, e := range list.Items {
		if e.Regarding.Name != name || e.Reason != ipv1.ReasonNodeLost {
			continue
		}
		t := e.EventTime.Time
		if e.Series != nil && e.Series.LastObservedTime.After(t) {
			t = e.Series.LastObservedTime.Time
		}
		if t.After(last) {
			last = t
		}
	}
	if last.IsZero() {
		return last, fmt.Errorf("no NodeLost Event for IP %s", name)
	}
	return last, nil
}

// failovers kills the holder's node trials times and measures the outage
// the client sees.
func (b *bench) failovers(ctx context.Context, trials int, addr netip.Addr) ([]float64, error) {
	var downtimes []float64
	for i := range trials {
		ip, err := staticip.WaitIP(ctx, b.c, "bench", 2*time.Minute, func(ip *ipv1.IP) bool { return staticip.Ready(ip) && len(ip.Status.Standbys) > 0 })
		if err != nil {
			return nil, fmt.Errorf("trial %d: %w", i+1, err)
		}
		holder, node := staticip.PodName(ip.Status.Pod), ip.Status.Node
		if _, err := staticip.AskUntil(b.lab.Net.ClientNamespace(), addr, holder, 30*time.Second); err != nil {
			return nil, fmt.Errorf("trial %d: %w", i+1, err)
		}
		probe := startProbe(b.lab.Net.ClientNamespace(), addr)
		time.Sleep(300 * time.Millisecond)
		calls, muts := 0, 0
		byAction := map[string]int{}
		if b.vpc != nil {
			calls, muts = b.vpc.EC2.TotalCalls(), b.vpc.EC2.Mutating()
			for _, a := range ec2Actions {
				byAction[a] = b.vpc.EC2.Calls(a)
			}
		}
		var tl *ipTimeline
		if b.wc != nil {
			if tl, err = watchIP(ctx, b.wc, "bench"); err != nil {
				return nil, err
			}
		}
		if err := b.lab.KillNode(ctx, node); err != nil {
			return nil, err
		}
		killed := time.Now()
		down, by, answered, err := probe.outage(killed, holder, 30*time.Second)
		if err != nil {
			return nil, fmt.Errorf("trial %d: %w", i+1, err)
		}
		downtimes = append(downtimes, down.Seconds())
		fmt.Printf("trial %2d: killed %s at %s (holder %s): %s answered after %.2f s of silence\n", i+1, node,
			killed.UTC().Format("15:04:05.000"), holder, by, down.Seconds())
		if b.vpc != nil {
			// Count up to the IP being Ready on the new node: the move's
			// calls and its verification.
			if _, err := staticip.WaitIP(ctx, b.c, "bench", 30*time.Second, func(ip *ipv1.IP) bool {
				return staticip.Ready(ip) && ip.Status.Node != node
			}); err != nil {
				return nil, fmt.Errorf("trial %d: %w", i+1, err)
			}
			calls, muts = b.vpc.EC2.TotalCalls()-calls, b.vpc.EC2.Mutating()-muts
			lost, err := b.nodeLostAt(ctx, "bench")
			if err != nil {
				return nil, fmt.Errorf("trial %d: %w", i+1, err)
			}
			// The EC2 calls the answer waited for: those between the node
			// declared lost and the answer (the verification after the
			// move may return after the answer).
			waited := b.vpc.EC2.CallsBetween(lost, answered)
			own := answered.Sub(lost) - time.Duration(waited)*ec2Lat
			b.ec2Calls, b.mutating, b.own = append(b.ec2Calls, calls), append(b.mutating, muts), append(b.own, own.Seconds())
			split := b.splitOwn(lost, answered)
			if tl != nil {
				split += "; " + tl.describe(lost, node)
			}
			var made []string
			for _, a := range ec2Actions {
				if n := b.vpc.EC2.Calls(a) - byAction[a]; n > 0 {
					made = append(made, fmt.Sprintf("%s x%d", a, n))
				}
			}
			fmt.Printf("          EC2: %d calls (%d mutating: %s), %d before the answer; NodeLost -> answer %.3f s, kubext's own %.3f s (%s)\n",
				calls, muts, strings.Join(made, ", "), waited, answered.Sub(lost).Seconds(), own.Seconds(), split)
		}
		if tl != nil {
			tl.stop()
		}
		// Bring the node back and replace its pod, so the next trial has a
		// standby again.
		if err := b.lab.ReviveNode(ctx, node); err != nil {
			return nil, err
		}
		fmt.Printf("          revived %s at %s\n", node, time.Now().UTC().Format("15:04:05.000"))
		time.Sleep(restartAfter)
		p, err := b.lab.StartIPAgent(ctx, node, b.agents...)
		if err != nil {
			return nil, err
		}
		b.agentProcs[node] = p
		if err := b.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: holder}},
			client.GracePeriodSeconds(0)); err != nil {
			return nil, err
		}
	}
	return downtimes, nil
}

// attachments creates IPs claimed by one fresh pod each and measures from
// the pod turning Ready to the IP turning Ready, both as observed here.
func (b *bench) attachments(ctx context.Context, n int) ([]float64, error) {
	var out []float64
	for i := range n {
		name := fmt.Sprintf("attach-%02d", i)
		if err := b.c.Create(ctx, &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Pool: "bench"}}); err != nil {
			return nil, err
		}
		if err := b.c.Create(ctx, staticip.Deployment(name, name, 1)); err != nil {
			return nil, err
		}
		var podReady, ipReady time.Time
		deadline := time.Now().Add(time.Minute)
		for podReady.IsZero() || ipReady.IsZero() {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("%s: pod or IP not Ready within a minute", name)
			}
			now := time.Now()
			if podReady.IsZero() {
				pods := &corev1.PodList{}
				if err := b.c.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": name}); err == nil {
					for _, p := range pods.Items {
						if podIsReady(&p) {
							podReady = now
						}
					}
				}
			}
			if ipReady.IsZero() {
				ip := &ipv1.IP{}
				if err := b.c.Get(ctx, client.ObjectKey{Name: name}, ip); err == nil && staticip.Ready(ip) {
					ipReady = now
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		out = append(out, max(ipReady.Sub(podReady), 0).Seconds())
		// Free the pool address and the node for the next one.
		_ = b.c.Delete(ctx, staticip.Deployment(name, name, 1))
		_ = b.c.Delete(ctx, &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	return out, nil
}

// probe asks the address every 50 ms from the client namespace and records
// who answered when.
type probe struct {
	results chan answer
	stop    chan struct{}
}

type answer struct {
	at  time.Time
	who string // "" when nobody answered
}

func startProbe(clientNS string, addr netip.Addr) *probe {
	p := &probe{results: make(chan answer, 4096), stop: make(chan struct{})}
	go func() {
		// With -provider aws or -overlap-asks an ask does not wait for the one before (an
		// ask sent just before the address answers again times out, and
		// the next must not wait for that), so that kubext's own time is
		// not hidden by the probe's. An ask nobody answered counts from
		// when it was sent, one answered from its answer.
		var asks sync.WaitGroup
		defer func() {
			asks.Wait()
			close(p.results)
		}()
		tick := time.NewTicker(probeEvery)
		defer tick.Stop()
		ask := func() {
			sent := time.Now()
			who, _ := staticip.AskFrom(clientNS, addr, 100*time.Millisecond)
			a := answer{at: time.Now(), who: who}
			if who == "" {
				a.at = sent
			}
			select {
			case p.results <- a:
			default:
			}
		}
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			if !overlapAsks {
				ask()
				continue
			}
			asks.Add(1)
			go func() {
				defer asks.Done()
				ask()
			}()
		}
	}()
	return p
}

// outage is the silence around the kill: from the holder's last answer
// before it to the first answer of another pod after it.
func (p *probe) outage(killed time.Time, holder string, timeout time.Duration) (time.Duration, string, time.Time, error) {
	defer close(p.stop)
	var lastHolder time.Time
	deadline := time.After(timeout)
	for {
		select {
		case a := <-p.results:
			switch {
			case a.who == holder && a.at.Before(killed):
				lastHolder = later(lastHolder, a.at)
			case a.who != "" && a.who != holder && a.at.After(killed):
				if lastHolder.IsZero() {
					lastHolder = killed
				}
				return a.at.Sub(lastHolder), a.who, a.at, nil
			}
		case <-deadline:
			return 0, "", time.Time{}, fmt.Errorf("no other pod answered within %s of the kill", timeout)
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// agentPeakRSS prints the peak resident memory (VmHWM), and the CPU over
// its life, of each node's running ip-agent process — the real binary, with the deployed agent's
// identity, caches and witness peer, through every trial it lived — and
// returns the largest, in MiB (issue 12: an agent within 30 MiB).
func (b *bench) agentPeakRSS() float64 {
	var peak float64
	for _, n := range b.lab.Nodes {
		p := b.agentProcs[n]
		if p == nil {
			continue
		}
		// nsenter (labnet.Command) execs the agent in place: the PID is
		// the agent's own, which its name confirms.
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.PID())); err != nil || strings.TrimSpace(string(comm)) != "ip-agent" {
			fmt.Printf("ip-agent on %s: process %d is not running as ip-agent (%q, %v); its memory not counted\n", n, p.PID(), comm, err)
			continue
		}
		m, _ := stats.ReadMemory(p.PID())
		cpu, _ := stats.ReadCPU(p.PID())
		fmt.Printf("ip-agent on %s: peak RSS %.1f MiB; now %.1f MiB, of which anonymous (heap, stacks) %.1f MiB, mapped files (the binary) %.1f MiB; CPU %.2f s in %.0f s (%.1f %% of a core)\n",
			n, m.Peak, m.Now, m.Anon, m.File, cpu.Seconds, cpu.Lived, cpu.Share())
		peak = max(peak, m.Peak)
	}
	return peak
}
