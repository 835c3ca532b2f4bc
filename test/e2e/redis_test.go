package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
)

// A Redis on the lab: the real StatefulSet controller creates its pods and
// kwok runs them on the simulated nodes. No Redis runs inside them, so the
// status must say the members are unreachable rather than invent a primary.
func TestRedisOnTheLab(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
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

	rd := &cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "e2e-cache"}, Spec: cachev1.RedisSpec{Size: 3}}
	g.Expect(c.Create(ctx, rd)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), rd) })
	key := client.ObjectKeyFromObject(rd)

	// members waits until n pods run on lab nodes and the status reports n
	// members, all Unreachable, and returns the pods.
	members := func(n int) []corev1.Pod {
		var pods []corev1.Pod
		g.Eventually(func(g Gomega) {
			list := &corev1.PodList{}
			g.Expect(c.List(ctx, list, client.InNamespace("default"), client.MatchingLabels{cachev1.LabelRedis: rd.Name})).To(Succeed())
			g.Expect(list.Items).To(HaveLen(n))
			for _, p := range list.Items {
				g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), p.Name)
				g.Expect(p.Status.PodIP).NotTo(BeEmpty(), p.Name)
				g.Expect(theLab.Nodes).To(ContainElement(p.Spec.NodeName), p.Name)
				g.Expect(metav1.GetControllerOf(&p).Name).To(Equal(rd.Name))
			}
			pods = list.Items

			got := &cachev1.Redis{}
			g.Expect(c.Get(ctx, key, got)).To(Succeed())
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
			g.Expect(got.Status.Replicas).To(BeEquivalentTo(n))
			g.Expect(got.Status.Members).To(HaveLen(n))
			for _, member := range got.Status.Members {
				g.Expect(member.State).To(Equal(cachev1.MemberUnreachable), member.Name)
			}
			g.Expect(got.Status.Primary).To(BeEmpty())
			g.Expect(got.Status.ReadyReplicas).To(BeZero())
			ready := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(cachev1.ReasonMembersUnreachable), ready.Message)
			g.Expect(ready.Message).To(ContainSubstring("kubext could not connect to the Redis of e2e-cache-0"))
		}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
		return pods
	}
	members(3)

	// The seed's kubectl patch.
	out, err := theLab.Kubectl(ctx, "patch", "redis", rd.Name, "-p", `{"spec":{"size": 4}}`, "--type=merge")
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	pods := members(4)

	// A member pod deleted is recreated by the StatefulSet and observed again.
	g.Expect(c.Delete(ctx, &pods[1])).To(Succeed())
	g.Eventually(func(g Gomega) {
		p := &corev1.Pod{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(&pods[1]), p)).To(Succeed())
		g.Expect(p.UID).NotTo(Equal(pods[1].UID))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	members(4)

	// Deleting the Redis deletes what it owns, through owner references.
	g.Expect(c.Delete(ctx, rd)).To(Succeed())
	g.Eventually(func() bool {
		err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: rd.Name}, &appsv1.StatefulSet{})
		return apierrors.IsNotFound(err)
	}, 2*time.Minute, time.Second).Should(BeTrue(), "the garbage collector deletes the StatefulSet")
}
