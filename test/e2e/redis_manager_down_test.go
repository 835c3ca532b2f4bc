package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
)

// The manager is down when the primary's node dies: nothing is promoted
// while it is away (Redis itself promotes nobody), and when it returns it
// promotes the replica with the most data, which still holds the key. Every
// member's ROLE and the role labels are sampled throughout: never two
// primaries, neither while the manager is away nor when the node comes back
// with its member restarted empty.
func TestRedisManagerDownWhilePrimaryDies(t *testing.T) {
	rootOnly(t)
	g := NewWithT(t)
	ctx := context.Background()
	_, err := theLab.StartPodNetwork(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	args := []string{"--controllers=redis", "--leader-elect=false"}
	m, err := theLab.StartManager(ctx, "manager-redis-away", args...)
	g.Expect(err).NotTo(HaveOccurred())
	c := labClient(t, theLab)
	g.Expect(cachev1.AddToScheme(c.Scheme())).To(Succeed())

	rd := createRedis(t, g, c, "e2e-away-cache")
	key := client.ObjectKeyFromObject(rd)
	status := func(g Gomega) *cachev1.Redis {
		got := &cachev1.Redis{}
		g.Expect(c.Get(ctx, key, got)).To(Succeed())
		return got
	}
	var primary corev1.Pod
	g.Eventually(func(g Gomega) {
		got := status(g)
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionReady)).To(BeTrue())
		g.Expect(got.Status.ReadyReplicas).To(BeEquivalentTo(3))
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "default", Name: got.Status.Primary}, &primary)).To(Succeed())
		r, err := roleOf(ctx, primary.Status.PodIP)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.replicas).To(Equal(2))
	}, 2*time.Minute, 200*time.Millisecond).Should(Succeed())
	watch := watchPrimaries(ctx, c, rd.Name)
	pc := redisAt(primary.Status.PodIP)
	g.Expect(pc.Set(ctx, "away", "kept", 0).Err()).To(Succeed())
	n, err := pc.Wait(ctx, 2, 5*time.Second).Result()
	pc.Close()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(BeEquivalentTo(2))

	// The manager stops, then the primary's node dies.
	m.Stop(5 * time.Second)
	node := primary.Spec.NodeName
	g.Expect(theLab.KillNode(ctx, node)).To(Succeed())
	revived := false
	t.Cleanup(func() {
		if !revived {
			_ = theLab.ReviveNode(context.Background(), node)
			_ = theLab.WaitNodeReady(context.Background(), node, true, time.Minute)
		}
	})
	// Away, nobody promotes: the replicas stay replicas.
	g.Consistently(func(g Gomega) {
		list := &corev1.PodList{}
		g.Expect(c.List(ctx, list, client.InNamespace("default"), client.MatchingLabels{cachev1.LabelRedis: rd.Name})).To(Succeed())
		asked := 0
		for _, p := range list.Items {
			if p.Spec.NodeName == node || p.Status.PodIP == "" {
				continue // died with the node
			}
			r, err := roleOf(ctx, p.Status.PodIP)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.role).To(Equal("slave"), p.Name)
			asked++
		}
		g.Expect(asked).To(BeNumerically(">", 0), "a replica on another node")
		g.Expect(status(g).Status.Primary).To(Equal(primary.Name))
	}, 5*time.Second, 500*time.Millisecond).Should(Succeed())

	// Back, the manager promotes the replica with the most data.
	start := time.Now()
	m, err = theLab.StartManager(ctx, "manager-redis-back", args...)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { m.Stop(5 * time.Second) })
	var promoted corev1.Pod
	g.Eventually(func(g Gomega) {
		got := status(g)
		g.Expect(got.Status.Primary).NotTo(BeEmpty())
		g.Expect(got.Status.Primary).NotTo(Equal(primary.Name))
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "default", Name: got.Status.Primary}, &promoted)).To(Succeed())
		g.Expect(promoted.Spec.NodeName).NotTo(Equal(node))
		r, err := roleOf(ctx, promoted.Status.PodIP)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.role).To(Equal("master"))
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	t.Logf("manager back: %s promoted %s after its start", promoted.Name, time.Since(start).Round(10*time.Millisecond))
	rc := redisAt(promoted.Status.PodIP)
	defer rc.Close()
	g.Expect(rc.Get(ctx, "away").Result()).To(Equal("kept"))

	// The node back, its member restarted empty follows the new primary.
	g.Expect(theLab.ReviveNode(ctx, node)).To(Succeed())
	revived = true
	g.Expect(theLab.WaitNodeReady(ctx, node, true, time.Minute)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := status(g)
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionReady)).To(BeTrue())
		g.Expect(got.Status.ReadyReplicas).To(BeEquivalentTo(3))
		g.Expect(got.Status.Primary).To(Equal(promoted.Name))
	}, 2*time.Minute, 200*time.Millisecond).Should(Succeed())
	watch.finish(g)
}
