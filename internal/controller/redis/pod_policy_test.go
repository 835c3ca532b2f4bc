package redis

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubext/kubext/test/testenv"
)

// podPolicy is config/policy/manager-pods.yaml's policy.
const podPolicy = "manager-pod-writes.cache.kubext.io"

// The manager's pod patch right (the Redis controller's role labels;
// RBAC cannot say which pods or fields) is narrowed by
// config/policy/manager-pods.yaml to the role label of pods a StatefulSet
// controls: a holder of its identity cannot change a pod's image,
// relabel pods to steer Services, or label pods nothing of Redis owns.
func TestDeployedManagerLabelsOnlyRedisRoles(t *testing.T) {
	f := newFixture(t)
	g := f.G
	ctx := t.Context()
	manager := deployedManager(t, g, "config/rbac/controllers/core/role.yaml", "config/rbac/controllers/redis/role.yaml")

	pod := func(name string, owners ...metav1.OwnerReference) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: deployedNS, Name: name + "-" + f.ID, OwnerReferences: owners,
			Labels: map[string]string{"app": "x"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "redis", Image: "redis:7"}}}}
		g.Expect(k8s.Create(ctx, p)).To(Succeed())
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), p) })
		return p
	}
	member := pod("member", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "r",
		UID: types.UID("5b1d6b8e-3f0e-4c4f-9a52-" + f.ID + "0000000")[:36], Controller: ptr.To(true)})
	other := pod("other")
	patch := func(p *corev1.Pod, body string, opts ...client.PatchOption) error {
		// Not ctx: the cleanup patches too.
		return manager.Patch(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}},
			client.RawPatch(types.MergePatchType, []byte(body)), opts...)
	}
	forged := []struct {
		name    string
		pod     *corev1.Pod
		body    string
		refused string
	}{
		{"another image", member, `{"spec":{"containers":[{"name":"redis","image":"evil:1"}]}}`, "may not change a pod's spec"},
		{"another label", member, `{"metadata":{"labels":{"app":"y"}}}`, "not app"},
		{"an annotation", member, `{"metadata":{"annotations":{"a":"b"}}}`, "may not change a pod's spec, annotations"},
		{"a role of its own", member, `{"metadata":{"labels":{"cache.kubext.io/role":"boss"}}}`, "only to primary or replica"},
		{"the role of a pod no StatefulSet controls", other, `{"metadata":{"labels":{"cache.kubext.io/role":"primary"}}}`, "only pods a StatefulSet controls"},
	}
	// Without the policy, its RBAC lets it.
	for _, tc := range forged {
		g.Expect(patch(tc.pod, tc.body, client.DryRunAll)).To(Succeed(), "without the policy: %s", tc.name)
	}
	g.Expect(testEnv().Apply(ctx, "config/policy/manager-pods.yaml")).To(Succeed())
	t.Cleanup(func() {
		removePodPolicies()
		g.Eventually(func() error { return patch(forged[0].pod, forged[0].body, client.DryRunAll) },
			testenv.WaitFor, 100*time.Millisecond).Should(Succeed(), "the policy still applies after its deletion")
	})
	g.Eventually(func() error { return patch(forged[0].pod, forged[0].body, client.DryRunAll) },
		testenv.WaitFor, 100*time.Millisecond).Should(MatchError(ContainSubstring(forged[0].refused)))
	for _, tc := range forged {
		g.Expect(patch(tc.pod, tc.body)).To(MatchError(ContainSubstring(tc.refused)), tc.name)
	}
	// What the controller does: a member's role set, changed and removed.
	for _, body := range []string{
		`{"metadata":{"labels":{"cache.kubext.io/role":"primary"}}}`,
		`{"metadata":{"labels":{"cache.kubext.io/role":"replica"}}}`,
		`{"metadata":{"labels":{"cache.kubext.io/role":null}}}`,
	} {
		g.Expect(patch(member, body)).To(Succeed(), body)
	}
	var got corev1.Pod
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(member), &got)).To(Succeed())
	g.Expect(got.Labels).To(Equal(map[string]string{"app": "x"}))
	g.Expect(got.Spec.Containers[0].Image).To(Equal("redis:7"))
}

// podDeletePolicy is config/policy/manager-pods.yaml's second policy.
const podDeletePolicy = "manager-pod-deletes.ip.kubext.io"

// The manager's pod delete right (the IP controller's, with
// --ip-delete-stale-pods) is narrowed to scheduled pods that claim a
// static IP: a holder of its identity cannot delete the cluster's other
// pods, kube-system's included.
func TestDeployedManagerDeletesOnlyClaimingPods(t *testing.T) {
	f := newFixture(t)
	g := f.G
	ctx := t.Context()
	manager := deployedManager(t, g, "config/rbac/controllers/core/role.yaml", "config/rbac/controllers/ip/role.yaml")

	pod := func(name, node string, annotations map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: deployedNS, Name: name + "-" + f.ID, Annotations: annotations},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
		g.Expect(k8s.Create(ctx, p)).To(Succeed())
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), p) })
		return p
	}
	claims := map[string]string{"ip.kubext.io/ip": "partner"}
	claiming := pod("claiming", "node-1", claims)
	plain := pod("plain", "node-1", nil)
	unscheduled := pod("unscheduled", "", claims)
	del := func(p *corev1.Pod, opts ...client.DeleteOption) error {
		return manager.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}, opts...)
	}
	// Without the policy, its RBAC lets it.
	g.Expect(del(plain, client.DryRunAll)).To(Succeed(), "without the policy")
	g.Expect(testEnv().Apply(ctx, "config/policy/manager-pods.yaml")).To(Succeed())
	t.Cleanup(func() {
		removePodPolicies()
		g.Eventually(func() error { return del(plain, client.DryRunAll) },
			testenv.WaitFor, 100*time.Millisecond).Should(Succeed(), "the policy still applies after its deletion")
	})
	const refused = "may delete only a scheduled pod that claims a static IP"
	g.Eventually(func() error { return del(plain, client.DryRunAll) }, testenv.WaitFor, 100*time.Millisecond).
		Should(MatchError(ContainSubstring(refused)))
	g.Expect(del(plain)).To(MatchError(ContainSubstring(refused)), "a pod that claims nothing")
	g.Expect(del(unscheduled)).To(MatchError(ContainSubstring(refused)), "a claiming pod on no node")
	// What the controller does, with its UID precondition.
	uid := claiming.UID
	g.Expect(del(claiming, client.Preconditions{UID: &uid})).To(Succeed())
	for _, p := range []*corev1.Pod{plain, unscheduled} {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})).To(Succeed(), "%s was deleted", p.Name)
	}
}

// removePodPolicies deletes what config/policy/manager-pods.yaml applied.
func removePodPolicies() {
	for _, n := range []string{podPolicy, podDeletePolicy} {
		_ = k8s.Delete(context.Background(), &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: n}})
		_ = k8s.Delete(context.Background(), &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
}
