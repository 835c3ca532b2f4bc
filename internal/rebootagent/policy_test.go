package rebootagent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/test/lab"
)

// agentConfig acts as the deployed reboot-agent: its service account, with
// a token bound to the node (impersonated here; node "" is a token bound to
// no node).
func agentConfig(node string) *rest.Config {
	cfg := rest.CopyConfig(testEnv.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:kubext-system:kubext-reboot-agent",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kubext-system", "system:authenticated"},
	}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	}
	return cfg
}

// agentRules are the rules of the Role or ClusterRole (kind) named name in
// config/reboot-agent/rbac.yaml, the ones deployed.
func agentRules(g Gomega, kind, name string) []rbacv1.PolicyRule {
	root, err := lab.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	data, err := os.ReadFile(filepath.Join(root, "config", "reboot-agent", "rbac.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var role rbacv1.ClusterRole // a Role has the same fields
		err := dec.Decode(&role)
		if errors.Is(err, io.EOF) {
			break
		}
		g.Expect(err).NotTo(HaveOccurred())
		if role.Kind == kind && role.Name == name {
			return role.Rules
		}
	}
	g.Expect(false).To(BeTrue(), "no %s %s in config/reboot-agent/rbac.yaml", kind, name)
	return nil
}

// createAll creates objects for the rest of the test.
func createAll(t *testing.T, g Gomega, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		g.Expect(k8s.Create(context.Background(), o)).To(Succeed())
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}
}

// grantAgentRBAC grants the agent's service account the rules of the
// ClusterRole in config/reboot-agent/rbac.yaml, the one deployed.
func grantAgentRBAC(t *testing.T, g Gomega) {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-reboot-agent"}, Rules: agentRules(g, "ClusterRole", "reboot-agent")}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-reboot-agent"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "kubext-system", Name: "kubext-reboot-agent"},
			{Kind: "ServiceAccount", Namespace: "acme-system", Name: "acme-reboot-agent"}}}
	createAll(t, g, role, binding)
}

// The admission policy in config/policy/reboot-agent.yaml and the RBAC in
// config/reboot-agent let a reboot-agent ask for a reboot of its own node,
// and do nothing else to any node.
func TestAgentMayOnlyAskForItsOwnNodesReboot(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	g.Expect(testEnv.Apply(ctx, "config/policy/reboot-agent.yaml")).To(Succeed())
	grantAgentRBAC(t, g)
	const own, other = "policy-a", "policy-b"
	for _, name := range []string{own, other} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{"pool": "blue"},
			Annotations: map[string]string{"example.com/owner": "ops"}}}
		g.Expect(k8s.Create(ctx, n)).To(Succeed())
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })
	}

	ownClient, err := client.New(agentConfig(own), client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	unbound, err := client.New(agentConfig(""), client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	// merge sends a JSON merge patch of the node's metadata or spec, as the
	// agent does.
	merge := func(c client.Client, node, patch string, opts ...client.PatchOption) error {
		return c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, []byte(patch)), opts...)
	}
	const askForReboot = `{"metadata":{"annotations":{"reboot.kubext.io/needed":"true"}}}`

	// The policy takes a moment to load: wait (with dry runs, which change
	// nothing if they pass) until it refuses.
	g.Eventually(func() error { return merge(ownClient, other, askForReboot, client.DryRunAll) }, waitFor, 100*time.Millisecond).Should(
		MatchError(ContainSubstring("the reboot-agent of node policy-a may change only its own node, not node policy-b")))

	for _, tc := range []struct{ name, patch, refusal string }{
		{"another protocol annotation", `{"metadata":{"annotations":{"reboot.kubext.io/now":"2026-03-01T03:00:00Z"}}}`,
			"the reboot-agent of node policy-a may change only the annotation reboot.kubext.io/needed, not reboot.kubext.io/now"},
		{"removing another annotation", `{"metadata":{"annotations":{"example.com/owner":null}}}`,
			"may change only the annotation reboot.kubext.io/needed, not example.com/owner"},
		{"needed other than true", `{"metadata":{"annotations":{"reboot.kubext.io/needed":"false"}}}`,
			`may only set reboot.kubext.io/needed to "true", not to "false"`},
		{"a label", `{"metadata":{"labels":{"pool":"green"}}}`,
			"the reboot-agent of node policy-a may not change the labels of its node"},
		{"cordoning", `{"spec":{"unschedulable":true}}`,
			"the reboot-agent of node policy-a may not change the spec of its node (e.g. cordon or uncordon it)"},
		{"a finalizer", `{"metadata":{"finalizers":["example.com/hold"]}}`,
			"may not change the finalizers or owner references of its node"},
	} {
		g.Expect(merge(ownClient, own, tc.patch)).To(MatchError(ContainSubstring(tc.refusal)), tc.name)
	}
	g.Expect(merge(unbound, own, askForReboot)).To(MatchError(ContainSubstring("the reboot-agent's token is not bound to a node")))

	// The same agent installed under another prefix and namespace is held
	// just as tightly.
	acmeCfg := agentConfig(own)
	acmeCfg.Impersonate.UserName = "system:serviceaccount:acme-system:acme-reboot-agent"
	acme, err := client.New(acmeCfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(merge(acme, other, askForReboot)).To(MatchError(ContainSubstring("the reboot-agent of node policy-a may change only its own node")))
	g.Expect(merge(acme, own, `{"spec":{"unschedulable":true}}`)).To(MatchError(ContainSubstring("may not change the spec of its node")))

	// What it may do: ask, and ask again.
	g.Expect(merge(ownClient, own, askForReboot)).To(Succeed())
	g.Expect(merge(ownClient, own, askForReboot)).To(Succeed())
	n := &corev1.Node{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: own}, n)).To(Succeed())
	g.Expect(n.Annotations).To(Equal(map[string]string{"example.com/owner": "ops", rebootv1.AnnotationNeeded: "true"}))
	// Once asked, it cannot take it back.
	g.Expect(merge(ownClient, own, `{"metadata":{"annotations":{"reboot.kubext.io/needed":null}}}`)).To(
		MatchError(ContainSubstring(`may only set reboot.kubext.io/needed to "true"; it may not remove it`)))

	// RBAC: no status (the boot ID it is fenced by), no deleting.
	n.Status.NodeInfo.BootID = "forged"
	err = ownClient.Status().Update(ctx, n)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "status update: %v", err)
	err = ownClient.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: own}})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "delete: %v", err)

	// The agent itself works with exactly these permissions: it watches its
	// node, asks for the reboot and records the Event.
	sentinel := filepath.Join(dir, other+"-reboot-required")
	g.Expect(os.WriteFile(sentinel, nil, 0o644)).To(Succeed())
	t.Cleanup(func() { _ = os.Remove(sentinel) })
	agentCtx, stop := context.WithCancel(ctx)
	defer stop()
	recorder, err := startAgent(agentCtx, agentConfig(other), other, Command{"true"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() (map[string]string, error) {
		n := &corev1.Node{}
		err := k8s.Get(ctx, client.ObjectKey{Name: other}, n)
		return n.Annotations, err
	}, waitFor).Should(HaveKeyWithValue(rebootv1.AnnotationNeeded, "true"))
	// The agent records its Event after its patch returns: the annotation
	// can be seen first.
	g.Eventually(func() int { return recorder.count(ReasonRebootRequested) }, waitFor).Should(Equal(1))
	g.Eventually(func() ([]string, error) { return nodeEvents(ctx, other, ReasonRebootRequested) }, waitFor).Should(
		ContainElement("Sentinel file " + sentinel + " present, reboot requested"))
	g.Expect(recorder.count(ReasonRebootRequested)).To(Equal(1), "asked once")
}
