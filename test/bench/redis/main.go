// Command redis is `make bench-redis`: on the lab, where the members of a
// Redis run real redis-server processes, a client writes sequence numbers
// at a fixed rate to the member labelled primary (as a client of the
// -primary Service follows it) and records every acknowledged write, while
// the primary fails: its process killed, its node killed (unplanned), a
// scale down that removes it, its node rebooted by kubext's reboot
// operator (planned: cordon, handover, drain, reboot). For each kind, -trials trials: the
// write gap (time from the last write acknowledged before the failure to
// the first one after) and the acknowledged writes missing from the
// primary afterwards. The last line of its output is machine-readable.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/test/bench/stats"
	"github.com/kubext/kubext/test/lab"
)

const (
	name      = "bench"
	namespace = "default"
	size      = 3
)

func main() {
	trials := flag.Int("trials", 10, "trials per failure kind")
	every := flag.Duration("write-every", 10*time.Millisecond, "the writer's fixed interval between writes")
	flag.Parse()
	redis.SetLogger(quiet{})
	if err := run(*trials, *every); err != nil {
		fmt.Fprintln(os.Stderr, "bench-redis:", err)
		os.Exit(1)
	}
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

type bench struct {
	lab *lab.Lab
	pn  *lab.PodNetwork
	c   client.Client
	w   *writer
	// password is the one kubext generated for the Redis (the default:
	// it names no Secret), read from the Secret its status names.
	password string
}

func run(trials int, every time.Duration) (err error) {
	ctx := context.Background()
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root: the members run in network namespaces")
	}
	l, err := lab.Up(ctx, lab.Options{Name: "bench-redis", Prefix: "kxbs", Nodes: 3, Network: true,
		CRDDirs: []string{"config/crd/bases"}, Log: func(f string, a ...any) { fmt.Printf("lab: "+f+"\n", a...) }})
	if err != nil {
		return err
	}
	defer func() {
		if derr := l.Down(ctx); err == nil {
			err = derr
		}
	}()
	b := &bench{lab: l}
	if b.pn, err = l.StartPodNetwork(ctx); err != nil {
		return err
	}
	defer b.pn.Stop()
	if _, err := l.StartManager(ctx, "manager", "--controllers=redis,reboot", "--reboot-drain-backoff", "3s"); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cachev1.AddToScheme(scheme))
	utilruntime.Must(rebootv1.AddToScheme(scheme))
	cfg, err := l.RESTConfig()
	if err != nil {
		return err
	}
	if b.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if err := b.rebootable(ctx); err != nil {
		return err
	}
	if err := b.c.Create(ctx, &cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: cachev1.RedisSpec{Size: size}}); err != nil {
		return err
	}
	if _, err := b.ready(ctx, size); err != nil {
		return err
	}
	if b.password, err = b.generatedPassword(ctx); err != nil {
		return err
	}
	b.w = startWriter(ctx, b.c, every, b.password)
	defer b.w.stop()
	fmt.Printf("Settings: Redis of %d members (no persistence); one write every %s to the pod labelled primary; %d trials per kind\n", size, every, trials)

	kinds := []struct {
		name    string
		planned bool
		fail    func(context.Context, corev1.Pod) (func() error, error)
	}{
		{"process killed", false, b.killProcess},
		{"node killed", false, b.killNode},
		{"scale down removes the primary", true, b.scaleDown},
		{"kubext reboots the primary's node", true, b.reboot},
	}
	var unplannedGaps []float64
	var unplannedLost, plannedLost int
	var plannedGapMax float64
	for _, k := range kinds {
		var gaps []float64
		lost := 0
		for i := range trials {
			gap, moved, n, err := b.trial(ctx, k.fail)
			if err != nil {
				return fmt.Errorf("%s, trial %d: %w", k.name, i+1, err)
			}
			fmt.Printf("%s, trial %d: write gap %.2f s (%s), acknowledged writes lost %d\n", k.name, i+1, gap.Seconds(), moved, n)
			gaps = append(gaps, gap.Seconds())
			lost += n
		}
		fmt.Printf("%s: write gap p50 %.2f s, p99 %.2f s, max %.2f s; acknowledged writes lost %d\n",
			k.name, stats.Percentile(gaps, 50), stats.Percentile(gaps, 99), slices.Max(gaps), lost)
		if k.planned {
			plannedLost += lost
			plannedGapMax = max(plannedGapMax, slices.Max(gaps))
		} else {
			unplannedGaps = append(unplannedGaps, gaps...)
			unplannedLost += lost
		}
	}
	acked := b.w.acked()
	missing, err := b.missing(ctx, acked)
	if err != nil {
		return err
	}
	fmt.Printf("Over the run: %d writes acknowledged, %d of them not on the primary at the end\n", len(acked), len(missing))
	fmt.Printf("unplanned_p50_s=%.2f unplanned_p99_s=%.2f unplanned_lost_writes=%d planned_lost_writes=%d planned_gap_max_s=%.2f trials=%d\n",
		stats.Percentile(unplannedGaps, 50), stats.Percentile(unplannedGaps, 99), unplannedLost, plannedLost, plannedGapMax, trials)
	return nil
}

// trial waits for a healthy Redis and a writer that is being acknowledged,
// fails the primary, waits until the Redis is healthy again (undoing the
// failure: node revived, size restored) and writes are acknowledged, and
// returns the longest write gap since the failure, when in that gap the
// writer was sent to another pod (the role label moved), and how many
// writes acknowledged since the failure are missing from the primary.
func (b *bench) trial(ctx context.Context, fail func(context.Context, corev1.Pod) (func() error, error)) (time.Duration, string, int, error) {
	primary, err := b.ready(ctx, size)
	if err != nil {
		return 0, "", 0, err
	}
	if err := b.w.waitAcked(ctx, 20); err != nil {
		return 0, "", 0, err
	}
	from := b.w.count()
	start := time.Now()
	undo, err := fail(ctx, primary)
	if err != nil {
		return 0, "", 0, err
	}
	if undo != nil {
		if err := undo(); err != nil {
			return 0, "", 0, err
		}
	}
	if _, err := b.readyNot(ctx, size, ""); err != nil {
		return 0, "", 0, err
	}
	if err := b.w.waitAcked(ctx, 20); err != nil {
		return 0, "", 0, err
	}
	gap, moved := b.w.maxGapSince(start)
	acked := b.w.acked()
	missing, err := b.missing(ctx, acked[from:])
	return gap, moved, len(missing), err
}

func (b *bench) killProcess(_ context.Context, primary corev1.Pod) (func() error, error) {
	p := b.pn.Container(namespace+"/"+primary.Name, "redis")
	if p == nil {
		return nil, fmt.Errorf("%s runs no redis-server", primary.Name)
	}
	p.Kill()
	return nil, nil
}

func (b *bench) killNode(ctx context.Context, primary corev1.Pod) (func() error, error) {
	node := primary.Spec.NodeName
	if err := b.lab.KillNode(ctx, node); err != nil {
		return nil, err
	}
	return func() error {
		// The node stays lost until a replica has been promoted: revived
		// at once, its member's restarted process would refuse the
		// replicas' links and tell them of the loss long before 2 s of
		// silence do (the short node-loss gaps of earlier runs).
		if err := b.promotedFrom(ctx, primary.Name); err != nil {
			return err
		}
		if err := b.lab.ReviveNode(ctx, node); err != nil {
			return err
		}
		return b.lab.WaitNodeReady(ctx, node, true, time.Minute)
	}, nil
}

// scaleDown sets the size to the primary's ordinal, so that the scale down
// removes it, and back; a primary of ordinal 0 is first moved by a
// crash of its process (not measured).
func (b *bench) scaleDown(ctx context.Context, primary corev1.Pod) (func() error, error) {
	ordinal, _ := strconv.Atoi(strings.TrimPrefix(primary.Name, name+"-"))
	if ordinal == 0 {
		return nil, fmt.Errorf("the primary is %s: a scale down cannot remove it", primary.Name)
	}
	if err := b.setSize(ctx, ordinal); err != nil {
		return nil, err
	}
	return func() error {
		if _, err := b.readyNot(ctx, ordinal, primary.Name); err != nil {
			return err
		}
		return b.setSize(ctx, size)
	}, nil
}

// rebootable puts the lab's nodes in one reboot group, one node at a time,
// each with a reboot agent whose reboot takes a second.
func (b *bench) rebootable(ctx context.Context) error {
	for _, n := range b.lab.Nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if err := b.c.Patch(ctx, node, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"bench":"redis"}}}`))); err != nil {
			return err
		}
		if _, err := b.lab.StartRebootAgent(ctx, n, b.lab.RebootCommandArgs(n, time.Second)...); err != nil {
			return err
		}
	}
	one := intstr.FromInt32(1)
	return b.c.Create(ctx, &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Spec: rebootv1.RebootGroupSpec{
		NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"bench": "redis"}},
		MaxUnavailable: &one, SoakSeconds: ptr.To[int32](1), RebootTimeoutSeconds: 120,
		Drain: rebootv1.DrainSpec{TimeoutSeconds: 30},
	}})
}

// reboot asks kubext's reboot operator to reboot the primary's node, which
// it cordons, drains (the primary hands over first) and reboots; undo waits
// until the node is back with a new boot and uncordoned.
func (b *bench) reboot(ctx context.Context, primary corev1.Pod) (func() error, error) {
	before := &corev1.Node{}
	if err := b.c.Get(ctx, client.ObjectKey{Name: primary.Spec.NodeName}, before); err != nil {
		return nil, err
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true"}}}`, rebootv1.AnnotationNeeded)
	if err := b.c.Patch(ctx, before.DeepCopy(), client.RawPatch("application/merge-patch+json", patch)); err != nil {
		return nil, err
	}
	return func() error {
		return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
			n := &corev1.Node{}
			if err := b.c.Get(ctx, client.ObjectKey{Name: before.Name}, n); err != nil {
				return false, nil //nolint:nilerr // retried
			}
			_, busy := n.Annotations[rebootv1.AnnotationInProgress]
			return n.Status.NodeInfo.BootID != before.Status.NodeInfo.BootID && !n.Spec.Unschedulable && !busy, nil
		})
	}, nil
}

// promotedFrom waits until the Redis names a primary other than old.
func (b *bench) promotedFrom(ctx context.Context, old string) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		rd := &cachev1.Redis{}
		if err := b.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, rd); err != nil {
			return false, nil //nolint:nilerr // retried
		}
		return rd.Status.Primary != "" && rd.Status.Primary != old, nil
	})
}

func (b *bench) setSize(ctx context.Context, n int) error {
	rd := &cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	return b.c.Patch(ctx, rd, client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"spec":{"size":%d}}`, n)))
}

func (b *bench) ready(ctx context.Context, n int) (corev1.Pod, error) {
	p, err := b.readyNot(ctx, n, "")
	if err != nil {
		return p, err
	}
	if strings.HasSuffix(p.Name, "-0") && b.w != nil {
		// A scale down cannot remove member 0: move the primary (a crash
		// of its process, not measured) so that every kind can be tried.
		b.pn.Container(namespace+"/"+p.Name, "redis").Kill()
		return b.readyNot(ctx, n, p.Name)
	}
	return p, nil
}

// readyNot waits until the Redis is Ready with n members and a primary
// other than not, and returns the primary's pod.
func (b *bench) readyNot(ctx context.Context, n int, not string) (corev1.Pod, error) {
	var primary corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		rd := &cachev1.Redis{}
		if err := b.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, rd); err != nil {
			return false, nil //nolint:nilerr // retried
		}
		ready := meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady)
		if ready != nil {
			last = ready.Message
		}
		if ready == nil || ready.Status != metav1.ConditionTrue || rd.Status.ReadyReplicas != int32(n) || rd.Status.Primary == "" || rd.Status.Primary == not {
			return false, nil
		}
		pods := &corev1.PodList{}
		if err := b.c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{cachev1.LabelRedis: name}); err != nil || len(pods.Items) != n {
			return false, nil //nolint:nilerr // retried
		}
		for _, p := range pods.Items {
			if p.Name == rd.Status.Primary && p.Labels[cachev1.LabelRole] == cachev1.RolePrimary {
				primary = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return primary, fmt.Errorf("the Redis did not become Ready with %d members (last: %s): %w", n, last, err)
	}
	return primary, nil
}

// missing returns the acknowledged sequence numbers the primary lacks.
func (b *bench) missing(ctx context.Context, seqs []int) ([]int, error) {
	primary, err := b.readyNot(ctx, size, "")
	if err != nil {
		return nil, err
	}
	rc := dial(primary.Status.PodIP, b.password)
	defer rc.Close()
	var out []int
	for len(seqs) > 0 {
		batch := seqs[:min(500, len(seqs))]
		seqs = seqs[len(batch):]
		keys := make([]string, len(batch))
		for i, n := range batch {
			keys[i] = key(n)
		}
		vals, err := rc.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, err
		}
		for i, v := range vals {
			if v != strconv.Itoa(batch[i]) {
				out = append(out, batch[i])
			}
		}
	}
	return out, nil
}

// generatedPassword reads the Redis's password as a client would: from
// the Secret its status names (the one kubext generated).
func (b *bench) generatedPassword(ctx context.Context) (string, error) {
	rd := &cachev1.Redis{}
	if err := b.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, rd); err != nil {
		return "", err
	}
	ref := rd.Status.PasswordSecretKeyRef
	if ref == nil {
		return "", fmt.Errorf("redis %s/%s: no password Secret in its status", namespace, name)
	}
	secret := &corev1.Secret{}
	if err := b.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, secret); err != nil {
		return "", err
	}
	pw, ok := secret.Data[ref.Key]
	if !ok || len(pw) == 0 {
		return "", fmt.Errorf("secret %s/%s has no key %q", namespace, ref.Name, ref.Key)
	}
	return string(pw), nil
}

func key(n int) string { return "seq-" + strconv.Itoa(n) }

// dial returns a client of the member at ip that tries each connection
// once: the writer looks the primary up again after a failure instead (as
// a client of the -primary Service would reach whatever it selects on its
// next dial). go-redis's default of 5 dial attempts 100 ms apart kept the
// writer on a gone primary's address for 0.4 s and more after the label
// had moved.
func dial(ip, password string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: net.JoinHostPort(ip, "6379"), Password: password, Protocol: 2, DisableIdentity: true,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
		DialerRetries: 1, MaxRetries: -1, PoolSize: 1})
}

// writer writes seq-N = N at a fixed rate to the pod labelled primary,
// which it looks up every 100 ms and after every failed write (one lookup
// at a time), as a client of the -primary Service would be sent there.
type writer struct {
	mu     sync.Mutex
	target string
	// moved is when the lookup found the primary label on another pod.
	moved []time.Time
	// failed are the writes not acknowledged.
	failed []failure
	seqs   []int
	at     []time.Time
	cancel context.CancelFunc
	done   chan struct{}
}

func startWriter(ctx context.Context, c client.Client, every time.Duration, password string) *writer {
	ctx, cancel := context.WithCancel(ctx)
	w := &writer{cancel: cancel, done: make(chan struct{})}
	lookup := func() {
		pods := &corev1.PodList{}
		err := c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{cachev1.LabelRedis: name, cachev1.LabelRole: cachev1.RolePrimary})
		if err == nil && len(pods.Items) == 1 {
			w.mu.Lock()
			if ip := pods.Items[0].Status.PodIP; ip != w.target {
				w.target = ip
				w.moved = append(w.moved, time.Now())
			}
			w.mu.Unlock()
		}
	}
	// One lookup at a time: every 100 ms, and at once after a failed
	// write. (Starting one per failed write, every 10 ms, loaded the API
	// server the operator writes the label through, and a late answer
	// could send the writer back to the old primary.)
	kick := make(chan struct{}, 1)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			lookup()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-kick:
			}
		}
	}()
	go func() {
		defer close(w.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		var rc *redis.Client
		addr := ""
		n := 0
		for {
			select {
			case <-ctx.Done():
				if rc != nil {
					rc.Close()
				}
				return
			case <-tick.C:
			}
			w.mu.Lock()
			target := w.target
			w.mu.Unlock()
			if target == "" {
				continue
			}
			if target != addr || rc == nil {
				if rc != nil {
					rc.Close()
				}
				rc, addr = dial(target, password), target
			}
			if err := rc.Set(ctx, key(n), n, 0).Err(); err != nil {
				w.mu.Lock()
				w.failed = append(w.failed, failure{time.Now(), target, err.Error()})
				w.mu.Unlock()
				rc.Close()
				rc = nil
				select {
				case kick <- struct{}{}:
				default:
				}
				continue
			}
			w.mu.Lock()
			w.seqs, w.at = append(w.seqs, n), append(w.at, time.Now())
			w.mu.Unlock()
			n++
		}
	}()
	return w
}

// failure is a write that was not acknowledged.
type failure struct {
	at     time.Time
	target string
	err    string
}

func (w *writer) stop() {
	w.cancel()
	<-w.done
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seqs)
}

func (w *writer) acked() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seqs)
}

// waitAcked waits for n more acknowledged writes.
func (w *writer) waitAcked(ctx context.Context, n int) error {
	from := w.count()
	return wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return w.count() >= from+n, nil
	})
}

// maxGapSince is the longest time between two acknowledged writes from
// the last one before t on, and says when in that gap the writer was sent
// to another pod: the part of the gap spent until the role label moved
// (the operator's) and the rest (the client's: lookup, dial, write).
func (w *writer) maxGapSince(t time.Time) (time.Duration, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	byTime := func(a, b time.Time) int { return a.Compare(b) }
	i, _ := slices.BinarySearchFunc(w.at, t, byTime)
	var gap time.Duration
	var from time.Time
	for i = max(i, 1); i < len(w.at); i++ {
		if d := w.at[i].Sub(w.at[i-1]); d > gap {
			gap, from = d, w.at[i-1]
		}
	}
	how := "the writer stayed on one pod"
	if j, _ := slices.BinarySearchFunc(w.moved, from, byTime); j < len(w.moved) && w.moved[j].Before(from.Add(gap)) {
		how = fmt.Sprintf("sent to the new primary %.2f s into it", w.moved[j].Sub(from).Seconds())
		// The writes that failed after the move, if any: the client's part.
		var after []string
		for _, f := range w.failed {
			if f.at.After(w.moved[j]) && f.at.Before(from.Add(gap)) {
				after = append(after, fmt.Sprintf("%.2f s %s: %s", f.at.Sub(from).Seconds(), f.target, f.err))
			}
		}
		if len(after) > 0 {
			how += "; then failed: " + strings.Join(after[:min(len(after), 3)], ", ")
		}
	}
	return gap, how
}
