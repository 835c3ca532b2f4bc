package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/redis/go-redis/v9"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
)

// redisPassword is the password of the Redis the running test made
// (createRedis): the one kubext generated for it. The lab tests run one at
// a time.
var redisPassword string

// quietRedis drops go-redis's own log lines: the tests' clients dial
// members that are down on purpose, and say so in their errors.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietRedis{}) }

// redisAt is a client of one member, dialled from the root namespace (where
// the manager runs) by its pod IP, as the manager dials it.
func redisAt(ip string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: net.JoinHostPort(ip, "6379"), Password: redisPassword, Protocol: 2, DisableIdentity: true,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, PoolSize: 1,
	})
}

// memberRole is a member's ROLE: "master" or "slave", its primary's host
// for a replica, and for a primary how many replicas it has.
type memberRole struct {
	role     string
	primary  string
	replicas int
}

func roleOf(ctx context.Context, ip string) (memberRole, error) {
	c := redisAt(ip)
	defer c.Close()
	v, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return memberRole{}, err
	}
	r := memberRole{role: fmt.Sprint(v[0])}
	switch r.role {
	case "master":
		if l, ok := v[2].([]any); ok {
			r.replicas = len(l)
		}
	case "slave":
		r.primary = fmt.Sprint(v[1])
	}
	return r, nil
}

// primaryWatch samples every member's ROLE and the role labels every 100ms
// and records any moment with two primaries: two pods labelled primary, or
// two members answering "master" that a client could take for the primary
// (labelled primary, or followed by replicas). A member that has just
// (re)started answers "slave" of nobody, never "master".
type primaryWatch struct {
	mu      sync.Mutex
	samples int
	bad     []string
	stop    chan struct{}
	done    chan struct{}
}

func watchPrimaries(ctx context.Context, c client.Client, name string) *primaryWatch {
	w := &primaryWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			pods := &corev1.PodList{}
			if err := c.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{cachev1.LabelRedis: name}); err != nil {
				continue
			}
			var labelled, masters []string
			for _, p := range pods.Items {
				if p.Labels[cachev1.LabelRole] == cachev1.RolePrimary {
					labelled = append(labelled, p.Name)
				}
				if p.Status.PodIP == "" {
					continue
				}
				r, err := roleOf(ctx, p.Status.PodIP)
				if err == nil && r.role == "master" && (r.replicas > 0 || p.Labels[cachev1.LabelRole] == cachev1.RolePrimary) {
					masters = append(masters, fmt.Sprintf("%s(%d replicas)", p.Name, r.replicas))
				}
			}
			w.mu.Lock()
			w.samples++
			if len(labelled) > 1 || len(masters) > 1 {
				w.bad = append(w.bad, fmt.Sprintf("%s: labelled primary %v, serving primaries %v", time.Now().Format("15:04:05.000"), labelled, masters))
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *primaryWatch) finish(g Gomega) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	g.Expect(w.samples).To(BeNumerically(">", 10))
	g.Expect(w.bad).To(BeEmpty(), "never two primaries")
}

// ackLog is what a writer had acknowledged, and when.
type ackLog struct {
	mu   sync.Mutex
	seqs []int
	at   []time.Time
}

// maxGap is the longest time between two acknowledged writes.
func (a *ackLog) maxGap() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var gap time.Duration
	for i := 1; i < len(a.at); i++ {
		gap = max(gap, a.at[i].Sub(a.at[i-1]))
	}
	return gap
}

// writeSequence writes seq-N = N, N = 0, 1, ..., every 10ms to the pod
// labelled primary (as a client following the -primary Service would),
// and records the writes acknowledged. stop ends it and returns them.
func writeSequence(ctx context.Context, c client.Client, name string) (*ackLog, func() []int) {
	a := &ackLog{}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		n := 0
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			pods := &corev1.PodList{}
			if c.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{cachev1.LabelRedis: name, cachev1.LabelRole: cachev1.RolePrimary}) != nil || len(pods.Items) != 1 {
				continue
			}
			rc := redisAt(pods.Items[0].Status.PodIP)
			err := rc.Set(ctx, fmt.Sprintf("seq-%d", n), n, 0).Err()
			rc.Close()
			if err == nil {
				a.mu.Lock()
				a.seqs, a.at = append(a.seqs, n), append(a.at, time.Now())
				a.mu.Unlock()
				n++
			}
		}
	}()
	return a, func() []int {
		close(done)
		<-finished
		a.mu.Lock()
		defer a.mu.Unlock()
		return append([]int(nil), a.seqs...)
	}
}

// A Redis on the lab runs real redis-server processes in its StatefulSet's
// pods (the pod network plays the kubelet for them), reached by their pod
// IPs: it becomes Ready with a primary and replicas, replicates a write,
// and survives its primary's process crashing and its primary's node being
// lost, with a replica promoted, no write lost, the -primary Service
// following and never two primaries.
func TestRedisOnTheLab(t *testing.T) {
	rootOnly(t)
	g := NewWithT(t)
	ctx := context.Background()
	pn, err := theLab.StartPodNetwork(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	// Its own manager, without leader election so that it need not wait
	// for another test's manager to give up the lease.
	m, err := theLab.StartManager(ctx, "manager-redis", "--controllers=redis", "--leader-elect=false")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { m.Stop(5 * time.Second) })
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cachev1.AddToScheme(scheme))
	cfg, err := theLab.RESTConfig()
	g.Expect(err).NotTo(HaveOccurred())
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())

	rd := createRedis(t, g, c, "e2e-cache")
	key := client.ObjectKeyFromObject(rd)

	pods := func(g Gomega) map[string]corev1.Pod {
		list := &corev1.PodList{}
		g.Expect(c.List(ctx, list, client.InNamespace("default"), client.MatchingLabels{cachev1.LabelRedis: rd.Name})).To(Succeed())
		out := map[string]corev1.Pod{}
		for _, p := range list.Items {
			out[p.Name] = p
		}
		return out
	}
	// ready waits until the Redis is Ready with n members, a primary other
	// than notPrimary and the rest its replicas, as every member's ROLE
	// and the -primary Service's endpoints confirm; it returns the
	// primary's pod and the replicas' pods.
	ready := func(n int, notPrimary string, within time.Duration) (primary corev1.Pod, replicas []corev1.Pod) {
		g.Eventually(func(g Gomega) {
			got := &cachev1.Redis{}
			g.Expect(c.Get(ctx, key, got)).To(Succeed())
			cond := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionReady)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionTrue), cond.Message)
			g.Expect(got.Status.Primary).NotTo(BeEmpty())
			g.Expect(got.Status.Primary).NotTo(Equal(notPrimary))
			g.Expect(got.Status.ReadyReplicas).To(BeEquivalentTo(n))
			ps := pods(g)
			g.Expect(ps).To(HaveLen(n))
			primary = ps[got.Status.Primary]
			g.Expect(primary.Labels).To(HaveKeyWithValue(cachev1.LabelRole, cachev1.RolePrimary))
			r, err := roleOf(ctx, primary.Status.PodIP)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.role).To(Equal("master"))
			g.Expect(r.replicas).To(Equal(n - 1))
			replicas = nil
			for name, p := range ps {
				if name == primary.Name {
					continue
				}
				g.Expect(p.Labels).To(HaveKeyWithValue(cachev1.LabelRole, cachev1.RoleReplica), name)
				r, err := roleOf(ctx, p.Status.PodIP)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(r).To(Equal(memberRole{role: "slave", primary: primary.Status.PodIP}), name)
				replicas = append(replicas, p)
			}
			// Clients find the primary through its Service.
			slices := &discoveryv1.EndpointSliceList{}
			g.Expect(c.List(ctx, slices, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: rd.Name + "-primary"})).To(Succeed())
			var addrs []string
			for _, s := range slices.Items {
				for _, e := range s.Endpoints {
					addrs = append(addrs, e.Addresses...)
				}
			}
			g.Expect(addrs).To(ConsistOf(primary.Status.PodIP))
		}, within, 200*time.Millisecond).Should(Succeed())
		return primary, replicas
	}
	// readKey waits until the member at ip holds want under k.
	readKey := func(ip, k, want string) {
		g.Eventually(func() (string, error) {
			rc := redisAt(ip)
			defer rc.Close()
			return rc.Get(ctx, k).Result()
		}, 10*time.Second, 100*time.Millisecond).Should(Equal(want), ip)
	}
	write := func(ip, k, v string) {
		rc := redisAt(ip)
		defer rc.Close()
		g.Expect(rc.Set(ctx, k, v, 0).Err()).To(Succeed())
		// Acknowledged by the replicas too before the test breaks anything.
		n, err := rc.Wait(ctx, 2, 5*time.Second).Result()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(BeEquivalentTo(2))
	}

	primary, replicas := ready(3, "", 2*time.Minute)
	for _, p := range append([]corev1.Pod{primary}, replicas...) {
		g.Expect(pn.PodNamespace("default/"+p.Name)).NotTo(BeEmpty(), p.Name)
	}
	// The generated password guards every member (protected mode on).
	anon := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(primary.Status.PodIP, "6379"), Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	g.Expect(anon.Ping(ctx).Err()).To(MatchError(ContainSubstring("NOAUTH")))
	anon.Close()
	pc := redisAt(primary.Status.PodIP)
	g.Expect(pc.ConfigGet(ctx, "protected-mode").Val()).To(HaveKeyWithValue("protected-mode", "yes"))
	pc.Close()
	// The process runs as the redis user, not as root.
	proc := pn.Container("default/"+primary.Name, "redis")
	g.Expect(proc).NotTo(BeNil())
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", proc.PID()))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(status)).To(MatchRegexp(`(?m)^Name:\s+redis-server`))
	g.Expect(string(status)).NotTo(MatchRegexp(`(?m)^Uid:\s+0\s`))
	g.Expect(string(status)).To(MatchRegexp(`(?m)^CapEff:\s+0+$`))

	watch := watchPrimaries(ctx, c, rd.Name)
	write(primary.Status.PodIP, "k1", "v1")
	for _, r := range replicas {
		readKey(r.Status.PodIP, "k1", "v1")
	}

	// The primary's redis-server crashes; the lab restarts it a second
	// later, empty. A replica is promoted and keeps the key; the restarted
	// member follows it and gets the key back, never the other way round.
	start := time.Now()
	proc.Kill()
	newPrimary, replicas := ready(3, primary.Name, 30*time.Second)
	t.Logf("process crash: %s promoted after %s", newPrimary.Name, time.Since(start).Round(10*time.Millisecond))
	readKey(newPrimary.Status.PodIP, "k1", "v1")
	for _, r := range replicas {
		readKey(r.Status.PodIP, "k1", "v1")
	}
	write(newPrimary.Status.PodIP, "k2", "v2")

	// The primary's node is lost: cut off and NotReady, its pods' processes
	// killed. A replica on another node is promoted and keeps both keys.
	primary = newPrimary
	node := primary.Spec.NodeName
	start = time.Now()
	g.Expect(theLab.KillNode(ctx, node)).To(Succeed())
	revived := false
	t.Cleanup(func() {
		if !revived {
			_ = theLab.ReviveNode(context.Background(), node)
		}
	})
	var promoted corev1.Pod
	g.Eventually(func(g Gomega) {
		got := &cachev1.Redis{}
		g.Expect(c.Get(ctx, key, got)).To(Succeed())
		g.Expect(got.Status.Primary).NotTo(BeEmpty())
		g.Expect(got.Status.Primary).NotTo(Equal(primary.Name))
		promoted = pods(g)[got.Status.Primary]
		g.Expect(promoted.Spec.NodeName).NotTo(Equal(node))
		r, err := roleOf(ctx, promoted.Status.PodIP)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.role).To(Equal("master"))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	t.Logf("node loss: %s promoted after %s", promoted.Name, time.Since(start).Round(10*time.Millisecond))
	readKey(promoted.Status.PodIP, "k1", "v1")
	readKey(promoted.Status.PodIP, "k2", "v2")

	// The node comes back: its members start empty and follow the new
	// primary.
	g.Expect(theLab.ReviveNode(ctx, node)).To(Succeed())
	revived = true
	g.Expect(theLab.WaitNodeReady(ctx, node, true, 30*time.Second)).To(Succeed())
	primary, replicas = ready(3, "", 2*time.Minute)
	g.Expect(primary.Name).To(Equal(promoted.Name))
	for _, r := range replicas {
		readKey(r.Status.PodIP, "k2", "v2")
	}
	watch.finish(g)

	// The seed's kubectl patch: a fourth member joins as a replica.
	out, err := theLab.Kubectl(ctx, "patch", "redis", rd.Name, "-p", `{"spec":{"size": 4}}`, "--type=merge")
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	primary, replicas = ready(4, "", 2*time.Minute)
	for _, r := range replicas {
		readKey(r.Status.PodIP, "k1", "v1")
	}

	// A scale down that removes the primary (size down to its ordinal) is
	// a planned switchover: the primary hands over first, and every write
	// it acknowledged meanwhile is on the new primary. A client writes
	// sequence numbers to the pod labelled primary all along.
	ordinal, err := strconv.Atoi(strings.TrimPrefix(primary.Name, rd.Name+"-"))
	g.Expect(err).NotTo(HaveOccurred())
	if ordinal == 0 {
		// No scale down removes member 0: move the primary first (its
		// process crashes, as above; the restarted member 0 never wins).
		pn.Container("default/"+primary.Name, "redis").Kill()
		primary, _ = ready(4, primary.Name, 30*time.Second)
		ordinal, err = strconv.Atoi(strings.TrimPrefix(primary.Name, rd.Name+"-"))
		g.Expect(err).NotTo(HaveOccurred())
	}
	acked, stopWriter := writeSequence(ctx, c, rd.Name)
	time.Sleep(time.Second)
	out, err = theLab.Kubectl(ctx, "patch", "redis", rd.Name, "-p", fmt.Sprintf(`{"spec":{"size": %d}}`, ordinal), "--type=merge")
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	primary, _ = ready(ordinal, primary.Name, 2*time.Minute)
	time.Sleep(time.Second)
	seqs := stopWriter()
	g.Expect(len(seqs)).To(BeNumerically(">", 10))
	rc := redisAt(primary.Status.PodIP)
	defer rc.Close()
	var lost []int
	for _, n := range seqs {
		if v, err := rc.Get(ctx, fmt.Sprintf("seq-%d", n)).Result(); err != nil || v != strconv.Itoa(n) {
			lost = append(lost, n)
		}
	}
	g.Expect(lost).To(BeEmpty(), "acknowledged writes lost in the switchover (of %d)", len(seqs))
	t.Logf("planned switchover: %d acknowledged writes, none lost; longest write gap %s", len(seqs), acked.maxGap())

	// Deleting the Redis deletes what it owns, through owner references,
	// and the lab stops its members' processes.
	g.Expect(c.Delete(ctx, rd)).To(Succeed())
	g.Eventually(func() bool {
		err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: rd.Name}, &appsv1.StatefulSet{})
		return apierrors.IsNotFound(err)
	}, 2*time.Minute, time.Second).Should(BeTrue(), "the garbage collector deletes the StatefulSet")
	g.Eventually(func() []string {
		var left []string
		for _, k := range pn.Pods() {
			if strings.HasPrefix(k, "default/"+rd.Name+"-") {
				left = append(left, k)
			}
		}
		return left
	}, time.Minute, 200*time.Millisecond).Should(BeEmpty())
}

// createRedis creates, in namespace default, a three-member Redis name
// with the default authentication, deleted when the test ends: kubext
// generates its password into a Secret, which createRedis reads (as a
// client would: the Secret status.passwordSecretKeyRef names) into
// redisPassword.
func createRedis(t *testing.T, g Gomega, c client.Client, name string) *cachev1.Redis {
	t.Helper()
	ctx := context.Background()
	rd := &cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: cachev1.RedisSpec{Size: 3}}
	g.Expect(c.Create(ctx, rd)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), rd) })
	g.Eventually(func(g Gomega) {
		got := &cachev1.Redis{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(rd), got)).To(Succeed())
		ref := got.Status.PasswordSecretKeyRef
		g.Expect(ref).NotTo(BeNil(), "no password Secret in the status yet")
		secret := &corev1.Secret{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: rd.Namespace, Name: ref.Name}, secret)).To(Succeed())
		g.Expect(metav1.IsControlledBy(secret, got)).To(BeTrue(), "Secret %s is not the Redis's", ref.Name)
		g.Expect(secret.Data[ref.Key]).To(HaveLen(43))
		redisPassword = string(secret.Data[ref.Key])
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	return rd
}
