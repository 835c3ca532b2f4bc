package deployed

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
)

// silentRedis drops go-redis's log lines: the test dials members that are
// down on purpose.
type silentRedis struct{}

func (silentRedis) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(silentRedis{}) }

// memberClient dials one Redis member by its pod IP from the root namespace
// (the lab routes member pods there as well as to the manager's pod), with
// its password.
func memberClient(ip, password string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: net.JoinHostPort(ip, "6379"), Password: password, Protocol: 2, DisableIdentity: true, PoolSize: 1, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
}

// servingPrimary reports whether the member at ip answers ROLE as a
// primary that a client could take for the one: it has replicas, or its
// pod is labelled primary. A member that restarted answers as a replica of
// nobody, never as a primary.
func servingPrimary(ctx context.Context, ip, password string, labelled bool) bool {
	c := memberClient(ip, password)
	defer c.Close()
	v, err := c.Do(ctx, "ROLE").Slice()
	if err != nil || len(v) < 3 || v[0] != "master" {
		return false
	}
	followers, _ := v[2].([]any)
	return labelled || len(followers) > 0
}

// A Redis through the deployed manager, the failover a user sees: the
// manager's pod, behind its node on the lab's pod network as in a cluster,
// reaches the members by pod IP and elects a primary; a key written to the
// primary is read from a replica; the primary's node is killed (its pods,
// the manager's replica there if any, die with it); a replica on another
// node is promoted and still holds the key; every member's ROLE and the
// role labels are sampled throughout and never show two primaries.
func TestDeployedRedisFailover(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cachev1.AddToScheme(scheme))
	cfg, err := theLab.RESTConfig()
	g.Expect(err).NotTo(HaveOccurred())
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = theLab.StartPodNetwork(ctx)
	g.Expect(err).NotTo(HaveOccurred())

	rd := &cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "deployed-cache"}, Spec: cachev1.RedisSpec{Size: 3}}
	g.Expect(c.Create(ctx, rd)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), rd) })
	members := func(g Gomega) map[string]corev1.Pod {
		list := &corev1.PodList{}
		g.Expect(c.List(ctx, list, client.InNamespace("default"), client.MatchingLabels{cachev1.LabelRedis: rd.Name})).To(Succeed())
		out := map[string]corev1.Pod{}
		for _, p := range list.Items {
			out[p.Name] = p
		}
		return out
	}
	var primary corev1.Pod
	var replicas []corev1.Pod
	g.Eventually(func(g Gomega) {
		got := &cachev1.Redis{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(rd), got)).To(Succeed())
		ready := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(cachev1.ReasonReplicating), ready.Message)
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
		pods := members(g)
		g.Expect(pods).To(HaveLen(3))
		primary, replicas = pods[got.Status.Primary], nil
		g.Expect(primary.Labels).To(HaveKeyWithValue(cachev1.LabelRole, cachev1.RolePrimary))
		for name, p := range pods {
			if name != got.Status.Primary {
				g.Expect(p.Labels).To(HaveKeyWithValue(cachev1.LabelRole, cachev1.RoleReplica), name)
				replicas = append(replicas, p)
			}
		}
	}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
	// The password the deployed manager generated (the Redis names none).
	password := generatedPassword(ctx, g, c, rd)

	// Never two primaries, sampled every 100ms from here on.
	var (
		mu      sync.Mutex
		samples int
		split   []string
	)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			list := &corev1.PodList{}
			if c.List(ctx, list, client.InNamespace("default"), client.MatchingLabels{cachev1.LabelRedis: rd.Name}) != nil {
				continue
			}
			var labelled, serving []string
			for _, p := range list.Items {
				isLabelled := p.Labels[cachev1.LabelRole] == cachev1.RolePrimary
				if isLabelled {
					labelled = append(labelled, p.Name)
				}
				if p.Status.PodIP != "" && servingPrimary(ctx, p.Status.PodIP, password, isLabelled) {
					serving = append(serving, p.Name)
				}
			}
			mu.Lock()
			samples++
			if len(labelled) > 1 || len(serving) > 1 {
				split = append(split, fmt.Sprintf("%s: labelled %v, serving %v", time.Now().Format("15:04:05.000"), labelled, serving))
			}
			mu.Unlock()
		}
	}()

	pc := memberClient(primary.Status.PodIP, password)
	defer pc.Close()
	g.Expect(pc.Set(ctx, "greeting", "hello from "+primary.Name, 0).Err()).To(Succeed())
	readKey := func(ip, want string, within time.Duration) {
		rc := memberClient(ip, password)
		defer rc.Close()
		g.Eventually(func() (string, error) { return rc.Get(ctx, "greeting").Result() }, within, 100*time.Millisecond).Should(Equal(want), ip)
	}
	want := "hello from " + primary.Name
	for _, r := range replicas {
		readKey(r.Status.PodIP, want, 10*time.Second)
	}

	node := primary.Spec.NodeName
	spreadManagers(t, node)
	start := time.Now()
	revive := killNode(t, node)
	// The manager's leader may have died with the node: its other replica
	// takes the Lease over first, so the bound is the Lease's and more.
	var promoted corev1.Pod
	g.Eventually(func(g Gomega) {
		got := &cachev1.Redis{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(rd), got)).To(Succeed())
		g.Expect(got.Status.Primary).NotTo(BeEmpty())
		g.Expect(got.Status.Primary).NotTo(Equal(primary.Name))
		promoted = members(g)[got.Status.Primary]
		g.Expect(promoted.Spec.NodeName).NotTo(Equal(node))
		g.Expect(servingPrimary(ctx, promoted.Status.PodIP, password, true)).To(BeTrue())
	}, 90*time.Second, 100*time.Millisecond).Should(Succeed())
	t.Logf("node %s killed: %s promoted after %s", node, promoted.Name, time.Since(start).Round(10*time.Millisecond))
	readKey(promoted.Status.PodIP, want, 5*time.Second)

	revive()
	// The revived members start empty and follow the new primary.
	g.Eventually(func(g Gomega) {
		got := &cachev1.Redis{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(rd), got)).To(Succeed())
		ready := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(cachev1.ReasonReplicating), ready.Message)
		g.Expect(got.Status.Primary).To(Equal(promoted.Name))
	}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
	for name, p := range members(g) {
		if name != promoted.Name {
			readKey(p.Status.PodIP, want, 10*time.Second)
		}
	}
	close(stop)
	<-stopped
	mu.Lock()
	defer mu.Unlock()
	g.Expect(samples).To(BeNumerically(">", 10))
	g.Expect(split).To(BeEmpty(), "never two primaries")
}

// generatedPassword reads the password kubext generated for rd as a client
// would: from the Secret its status names, which the Redis controls.
func generatedPassword(ctx context.Context, g Gomega, c client.Client, rd *cachev1.Redis) string {
	got := &cachev1.Redis{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(rd), got)).To(Succeed())
	ref := got.Status.PasswordSecretKeyRef
	g.Expect(ref).NotTo(BeNil(), "no password Secret in the status")
	secret := &corev1.Secret{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: rd.Namespace, Name: ref.Name}, secret)).To(Succeed())
	g.Expect(metav1.IsControlledBy(secret, got)).To(BeTrue(), "Secret %s is not the Redis's", ref.Name)
	g.Expect(secret.Type).To(Equal(corev1.SecretTypeOpaque))
	g.Expect(secret.Data[ref.Key]).NotTo(BeEmpty())
	return string(secret.Data[ref.Key])
}
