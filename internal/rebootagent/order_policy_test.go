package rebootagent

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// impersonating is a client acting as user in groups, with the node patch
// rights many components have (a CNI, node-feature-discovery, a person).
func impersonating(t *testing.T, g Gomega, user string, groups ...string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(testEnv.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	return c
}

// Only the reboot controller's service account orders reboots
// (config/policy/reboot-order.yaml): anyone else allowed to patch nodes is
// refused every order annotation, may still ask for a reboot and clear a
// failure, and the break-glass group may do everything.
func TestOnlyTheControllerOrdersReboots(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	g.Expect(testEnv.Apply(ctx, "config/policy/reboot-order.yaml")).To(Succeed())
	t.Cleanup(func() { deletePolicy("reboot-orders.reboot.kubext.io") })
	patcher := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-node-patcher"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "patch", "update"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-node-patcher"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: patcher.Name},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:authenticated"},
		}}
	createAll(t, g, patcher, binding)
	const name = "orders-a"
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Annotations: map[string]string{"reboot.kubext.io/failed": "did not come back"}}}
	g.Expect(k8s.Create(ctx, n)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })

	merge := func(c client.Client, patch string, opts ...client.PatchOption) error {
		return c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, []byte(patch)), opts...)
	}
	cni := impersonating(t, g, "system:serviceaccount:kube-system:cni-agent", "system:serviceaccounts")
	person := impersonating(t, g, "jane@example.com", "ops")
	const reboot = `{"metadata":{"annotations":{"reboot.kubext.io/now":"2026-03-01T03:00:00Z","reboot.kubext.io/boot-id":"b1","reboot.kubext.io/in-progress":"2026-03-01T03:00:00Z"}}}`

	// The policy takes a moment to load.
	g.Eventually(func() error { return merge(cni, reboot, client.DryRunAll) }, waitFor, 100*time.Millisecond).Should(
		MatchError(ContainSubstring("only the kubext reboot controller may set or change")))
	// And a moment to unload: the next tests must not meet it. (Runs
	// before the node and the RBAC go.)
	t.Cleanup(func() {
		unloadPolicy(g, "reboot-orders.reboot.kubext.io", func() error {
			return cni.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}},
				client.RawPatch(types.MergePatchType, []byte(reboot)), client.DryRunAll)
		})
	})
	for _, tc := range []struct{ name, patch, refused string }{
		{"an order", reboot, "reboot.kubext.io/now, reboot.kubext.io/boot-id, reboot.kubext.io/in-progress"},
		{"a cordon kubext would lift", `{"metadata":{"annotations":{"reboot.kubext.io/cordoned-by-us":"true"}}}`, "reboot.kubext.io/cordoned-by-us"},
		{"jumping the queue", `{"metadata":{"annotations":{"reboot.kubext.io/needed-since":"2000-01-01T00:00:00Z"}}}`, "reboot.kubext.io/needed-since"},
		{"a failure", `{"metadata":{"annotations":{"reboot.kubext.io/failed":"forged"}}}`, "reboot.kubext.io/failed"},
	} {
		for _, c := range []client.Client{cni, person} {
			g.Expect(merge(c, tc.patch)).To(MatchError(ContainSubstring(tc.refused)), tc.name)
		}
	}
	// What anyone with node patch rights may still do: ask, and clear a
	// failure so the controller considers the node again.
	g.Expect(merge(person, `{"metadata":{"annotations":{"reboot.kubext.io/needed":"true"}}}`)).To(Succeed())
	g.Expect(merge(person, `{"metadata":{"annotations":{"reboot.kubext.io/failed":null}}}`)).To(Succeed())

	// The controller, by its exact service account as config/default
	// names it; and break glass.
	for _, c := range []client.Client{
		impersonating(t, g, "system:serviceaccount:kubext-system:kubext-controller-manager", "system:serviceaccounts"),
		impersonating(t, g, "jane@example.com", "reboot.kubext.io:break-glass"),
	} {
		g.Expect(merge(c, reboot, client.DryRunAll)).To(Succeed())
	}
	// Look-alikes are refused: the manager's name in a namespace anyone
	// allowed to create service accounts there could own, another
	// operator's controller-manager, the bare name, and the right
	// namespace with another name.
	for _, user := range []string{
		"system:serviceaccount:tenant-a:kubext-controller-manager",
		"system:serviceaccount:acme-system:acme-controller-manager",
		"system:serviceaccount:kubext-system:controller-manager",
		"system:serviceaccount:kubext-system:kubext-controller-manager-x",
	} {
		c := impersonating(t, g, user, "system:serviceaccounts")
		g.Expect(merge(c, reboot, client.DryRunAll)).To(MatchError(ContainSubstring("only the kubext reboot controller may set or change")), user)
	}
}

// deletePolicy deletes an admission policy and its binding (both named
// name, as in config/policy).
func deletePolicy(name string) {
	_ = k8s.Delete(context.Background(), &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}})
	_ = k8s.Delete(context.Background(), &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// unloadPolicy deletes an admission policy and waits until the API server
// no longer applies it, i.e. until refused (a dry run the policy refused)
// succeeds: the next tests must not meet it.
func unloadPolicy(g Gomega, name string, refused func() error) {
	deletePolicy(name)
	g.Eventually(refused, waitFor, 100*time.Millisecond).Should(Succeed(), "the %s policy still applies after its deletion", name)
}
