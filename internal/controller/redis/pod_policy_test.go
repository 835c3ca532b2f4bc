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
		_ = k8s.Delete(context.Background(), &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: podPolicy}})
		_ = k8s.Delete(context.Background(), &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: podPolicy}})
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
