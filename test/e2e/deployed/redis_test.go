package deployed

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
)

// A Redis through the deployed manager: its StatefulSet's pods run on the
// lab's nodes and the status reports every member, which takes the
// manager's rights on StatefulSets, Services, pods and its status. The
// members are unreachable here: the lab runs redis-server only when the
// pod network runs, and routes the members' pod IPs for the root
// namespace's processes (test/e2e's local manager), not for a deployed
// manager's system pod namespace.
func TestDeployedRedisReportsItsMembers(t *testing.T) {
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

	rd := &cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "deployed-cache"}, Spec: cachev1.RedisSpec{Size: 3}}
	g.Expect(c.Create(ctx, rd)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), rd) })
	g.Eventually(func(g Gomega) {
		list := &corev1.PodList{}
		g.Expect(c.List(ctx, list, client.InNamespace("default"), client.MatchingLabels{cachev1.LabelRedis: rd.Name})).To(Succeed())
		g.Expect(list.Items).To(HaveLen(3))
		got := &cachev1.Redis{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(rd), got)).To(Succeed())
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(got.Status.Members).To(HaveLen(3))
		for _, m := range got.Status.Members {
			g.Expect(m.State).To(Equal(cachev1.MemberUnreachable), m.Name)
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(cachev1.ReasonMembersUnreachable), ready.Message)
	}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
}
