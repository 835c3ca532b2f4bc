package rebootagent

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
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
		{APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"}, Verbs: []string{"get", "list", "patch", "update"}}}}
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
	// The same patch through nodes/status, which CNIs, node-problem-
	// detector and cloud controllers may write on every node: the API
	// server keeps a status write's annotations.
	mergeStatus := func(c client.Client, patch string) error {
		return c.Status().Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, []byte(patch)))
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
		// What the ledger's repair knows a completed reboot by: forged, it
		// could free the slot of a node still down.
		{"a completed reboot", `{"metadata":{"annotations":{"reboot.kubext.io/rebooted-at":"2026-03-01T03:10:00Z"}}}`, "reboot.kubext.io/rebooted-at"},
	} {
		for _, c := range []client.Client{cni, person} {
			g.Expect(merge(c, tc.patch)).To(MatchError(ContainSubstring(tc.refused)), tc.name)
			g.Expect(mergeStatus(c, tc.patch)).To(MatchError(ContainSubstring(tc.refused)), tc.name+" through nodes/status")
		}
	}
	var n2 corev1.Node
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, &n2)).To(Succeed())
	g.Expect(n2.Annotations).To(Equal(map[string]string{"reboot.kubext.io/failed": "did not come back"}), "a refused write left something")
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

// Only the reboot controller writes its approvals ledger
// (config/policy/reboot-ledger.yaml): a namespace admin of kubext-system
// or a controller allowed to write ConfigMaps everywhere is refused
// creating, changing and deleting it, and may still write other
// ConfigMaps there; the controller and break glass may.
func TestOnlyTheControllerWritesTheLedger(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	const ns = "kubext-system"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		g.Expect(apierrors.IsAlreadyExists(err)).To(BeTrue(), "%v", err)
	}
	g.Expect(testEnv.Apply(ctx, "config/policy/reboot-ledger.yaml")).To(Succeed())
	t.Cleanup(func() { deletePolicy("reboot-ledger.reboot.kubext.io") })
	writer := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-configmap-writer"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update", "patch", "delete"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-configmap-writer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: writer.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:authenticated"}}}
	createAll(t, g, writer, binding)

	slots := ledgerJSON(g, map[string]rebootv1.LedgerSlot{"n1": {Group: "g", Approval: "2026-03-01T02:00:00Z", NodeResourceVersion: "1"}})
	ledger := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: rebootv1.DefaultLedgerName, Namespace: ns},
			Data: map[string]string{rebootv1.LedgerKey: slots}}
	}
	gitops := impersonating(t, g, "system:serviceaccount:argocd:argocd-application-controller", "system:serviceaccounts")
	admin := impersonating(t, g, "jane@example.com", "kubext-admins")
	controller := impersonating(t, g, "system:serviceaccount:kubext-system:kubext-controller-manager", "system:serviceaccounts")
	const refused = "only the kubext reboot controller may write its approvals ledger"

	// The policy takes a moment to load, and to unload.
	g.Eventually(func() error { return gitops.Create(ctx, ledger(), client.DryRunAll) }, waitFor, 100*time.Millisecond).Should(
		MatchError(ContainSubstring(refused)))
	t.Cleanup(func() {
		unloadPolicy(g, "reboot-ledger.reboot.kubext.io", func() error {
			return gitops.Create(context.Background(), ledger(), client.DryRunAll)
		})
	})
	for _, c := range []client.Client{gitops, admin} {
		g.Expect(c.Create(ctx, ledger())).To(MatchError(ContainSubstring(refused)), "creating it")
	}
	// The controller creates it; nobody else changes or deletes it.
	g.Expect(controller.Create(ctx, ledger())).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ledger()) })
	for _, c := range []client.Client{gitops, admin} {
		g.Expect(c.Patch(ctx, ledger(), client.RawPatch(types.MergePatchType, []byte(`{"data":{"slots":"{}"}}`)))).To(
			MatchError(ContainSubstring(refused)), "emptying it")
		g.Expect(c.Delete(ctx, ledger())).To(MatchError(ContainSubstring(refused)), "deleting it")
	}
	var got corev1.ConfigMap
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ledger()), &got)).To(Succeed())
	g.Expect(got.Data).To(Equal(ledger().Data), "a refused write changed the ledger")
	// Other ConfigMaps of the namespace, and a ledger's name elsewhere,
	// are not its business.
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubext-something-else", Namespace: ns}}
	g.Expect(gitops.Create(ctx, other, client.DryRunAll)).To(Succeed())
	elsewhere := ledger()
	elsewhere.Namespace = "default"
	g.Expect(gitops.Create(ctx, elsewhere, client.DryRunAll)).To(Succeed())
	// The controller and break glass may change it.
	breakGlass := impersonating(t, g, "jane@example.com", "reboot.kubext.io:break-glass")
	for _, c := range []client.Client{controller, breakGlass} {
		g.Expect(c.Patch(ctx, ledger(), client.RawPatch(types.MergePatchType, []byte(`{"data":{"slots":"{}"}}`)), client.DryRunAll)).To(Succeed())
	}
	g.Expect(breakGlass.Delete(ctx, ledger(), client.DryRunAll)).To(Succeed())
}
