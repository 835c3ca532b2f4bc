package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// kubext's own reboot operator reboots the node of a Redis's primary, a
// planned switchover: the drain cordons the node, the Redis controller sees
// the cordon and the primary hands over (FAILOVER, which waits for the
// replica to catch up), the primary's PodDisruptionBudget holds its
// eviction back until the role label has moved, then the drain evicts it,
// the node reboots and comes back. A client writing to the pod labelled
// primary all along loses no acknowledged write, and no moment shows two
// primaries.
func TestRedisPrimaryNodeRebootedByKubext(t *testing.T) {
	rootOnly(t)
	g := NewWithT(t)
	ctx := context.Background()
	_, err := theLab.StartPodNetwork(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	m, err := theLab.StartManager(ctx, "manager-redis-reboot", "--controllers=redis,reboot", "--leader-elect=false",
		"--reboot-drain-backoff", "3s")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { m.Stop(5 * time.Second) })
	c := labClient(t, theLab)
	g.Expect(cachev1.AddToScheme(c.Scheme())).To(Succeed())

	rd := createRedis(t, g, c, "e2e-reboot-cache")
	key := client.ObjectKeyFromObject(rd)
	readyWith := func(notPrimary string, within time.Duration) corev1.Pod {
		var primary corev1.Pod
		g.Eventually(func(g Gomega) {
			got := &cachev1.Redis{}
			g.Expect(c.Get(ctx, key, got)).To(Succeed())
			cond := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionReady)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionTrue), cond.Message)
			g.Expect(got.Status.ReadyReplicas).To(BeEquivalentTo(3))
			g.Expect(got.Status.Primary).NotTo(BeEmpty())
			g.Expect(got.Status.Primary).NotTo(Equal(notPrimary))
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "default", Name: got.Status.Primary}, &primary)).To(Succeed())
			r, err := roleOf(ctx, primary.Status.PodIP)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.role).To(Equal("master"))
			g.Expect(r.replicas).To(Equal(2))
		}, within, 200*time.Millisecond).Should(Succeed())
		return primary
	}
	primary := readyWith("", 2*time.Minute)
	node := primary.Spec.NodeName

	// One reboot group over the lab's nodes, one node at a time; the
	// primary's node has an agent and asks.
	for _, n := range theLab.Nodes {
		patchNode(t, c, n, func(n *corev1.Node) { n.Labels["pool"] = "redis-reboot" })
	}
	makeRebootGroup(t, c, "redis-reboot", "redis-reboot", intstr.FromInt32(1))
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "redis-reboot"}})
		for _, n := range theLab.Nodes {
			patchNode(t, c, n, func(n *corev1.Node) { delete(n.Labels, "pool") })
		}
	})
	agent, err := theLab.StartRebootAgent(ctx, node, theLab.RebootCommandArgs(node, time.Second)...)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { agent.Stop(5 * time.Second) })
	before := &corev1.Node{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: node}, before)).To(Succeed())

	watch := watchPrimaries(ctx, c, rd.Name)
	acked, stopWriter := writeSequence(ctx, c, rd.Name)
	time.Sleep(time.Second)
	start := time.Now()
	out, err := theLab.Kubectl(ctx, "annotate", "node", node, rebootv1.AnnotationNeeded+"=true")
	g.Expect(err).NotTo(HaveOccurred(), string(out))

	// Rebooted: a new boot ID, the node uncordoned and done.
	g.Eventually(func(g Gomega) {
		n := &corev1.Node{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
		g.Expect(n.Status.NodeInfo.BootID).NotTo(Equal(before.Status.NodeInfo.BootID))
		g.Expect(n.Spec.Unschedulable).To(BeFalse())
		g.Expect(n.Annotations).NotTo(HaveKey(rebootv1.AnnotationInProgress))
	}, 4*time.Minute, 500*time.Millisecond).Should(Succeed())
	t.Logf("node %s rebooted by kubext after %s", node, time.Since(start).Round(100*time.Millisecond))
	newPrimary := readyWith(primary.Name, 2*time.Minute)
	g.Expect(newPrimary.Spec.NodeName).NotTo(Equal(node))
	time.Sleep(time.Second)
	seqs := stopWriter()
	watch.finish(g)
	g.Expect(len(seqs)).To(BeNumerically(">", 10))
	rc := redisAt(newPrimary.Status.PodIP)
	defer rc.Close()
	var lost []int
	for _, n := range seqs {
		if v, err := rc.Get(ctx, fmt.Sprintf("seq-%d", n)).Result(); err != nil || v != strconv.Itoa(n) {
			lost = append(lost, n)
		}
	}
	g.Expect(lost).To(BeEmpty(), "acknowledged writes lost in the reboot's switchover (of %d)", len(seqs))

	// The handover came from the cordon, before the eviction. Events are
	// written asynchronously by the manager's event broadcaster, behind
	// every Event before them: wait for it a little.
	var handover string
	g.Eventually(func(g Gomega) {
		events := &eventsv1.EventList{}
		g.Expect(c.List(ctx, events, client.InNamespace("default"))).To(Succeed())
		for _, e := range events.Items {
			if e.Regarding.Kind == "Redis" && e.Regarding.Name == rd.Name && e.Reason == "HandingOver" {
				handover = e.Note
			}
		}
		g.Expect(handover).To(ContainSubstring(fmt.Sprintf("Primary %s is about to be evicted (node %s is cordoned)", primary.Name, node)))
	}, 15*time.Second, 250*time.Millisecond).Should(Succeed())
	t.Logf("planned reboot: %d acknowledged writes, none lost; longest write gap %s; %s",
		len(seqs), acked.maxGap(), strings.TrimSpace(handover))
}
