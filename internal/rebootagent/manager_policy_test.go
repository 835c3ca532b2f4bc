package rebootagent

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The manager's node patch right is narrowed by
// config/policy/manager-nodes.yaml to what the reboot controller writes:
// its protocol annotations and the cordon. Another service account of the
// same short name (another operator's controller-manager) is not
// restricted by it.
func TestManagerMayChangeOnlyTheRebootFieldsOfNodes(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	g.Expect(testEnv.Apply(ctx, "config/policy/manager-nodes.yaml")).To(Succeed())
	t.Cleanup(func() { deletePolicy("manager-node-writes.reboot.kubext.io") })
	// The manager's node rights (config/rbac/role.yaml).
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-manager-nodes"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-manager-nodes"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts"}}}
	createAll(t, g, role, binding)
	const name = "manager-writes"
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "blue"},
		Annotations: map[string]string{"example.com/owner": "ops"}}}
	g.Expect(k8s.Create(ctx, n)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })
	merge := func(c client.Client, patch string, opts ...client.PatchOption) error {
		return c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, []byte(patch)), opts...)
	}
	manager := impersonating(t, g, "system:serviceaccount:kubext-system:kubext-controller-manager", "system:serviceaccounts")
	other := impersonating(t, g, "system:serviceaccount:acme-system:acme-controller-manager", "system:serviceaccounts")
	const relabel = `{"metadata":{"labels":{"pool":"green"}}}`

	g.Eventually(func() error { return merge(manager, relabel, client.DryRunAll) }, waitFor, 100*time.Millisecond).Should(
		MatchError(ContainSubstring("the kubext manager may not change the labels of a node")))
	// Unloaded before the next tests (and before the node and RBAC go).
	t.Cleanup(func() {
		unloadPolicy(g, "manager-node-writes.reboot.kubext.io", func() error {
			return manager.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}},
				client.RawPatch(types.MergePatchType, []byte(relabel)), client.DryRunAll)
		})
	})
	for _, tc := range []struct{ name, patch, refused string }{
		{"another annotation", `{"metadata":{"annotations":{"example.com/owner":"me"}}}`,
			"the kubext manager may change only reboot.kubext.io/ annotations of a node, not example.com/owner"},
		{"removing another annotation", `{"metadata":{"annotations":{"example.com/owner":null}}}`, "not example.com/owner"},
		{"a taint", `{"spec":{"taints":[{"key":"example.com/drain","effect":"NoExecute"}]}}`,
			"may change only spec.unschedulable of a node (the cordon), not its taints"},
		{"a finalizer", `{"metadata":{"finalizers":["example.com/hold"]}}`, "may not change the finalizers or owner references"},
	} {
		g.Expect(merge(manager, tc.patch)).To(MatchError(ContainSubstring(tc.refused)), tc.name)
	}
	// What the reboot controller does: its annotations and the cordon.
	g.Expect(merge(manager, `{"spec":{"unschedulable":true},"metadata":{"annotations":{"reboot.kubext.io/in-progress":"2026-03-01T03:00:00Z","reboot.kubext.io/cordoned-by-us":"true"}}}`)).To(Succeed())
	g.Expect(merge(manager, `{"spec":{"unschedulable":false},"metadata":{"annotations":{"reboot.kubext.io/in-progress":null,"reboot.kubext.io/cordoned-by-us":null}}}`)).To(Succeed())
	// Another operator's controller-manager is not this policy's business.
	g.Expect(merge(other, relabel)).To(Succeed())
}
