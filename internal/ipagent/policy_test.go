package ipagent

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// agentClient acts as the deployed ip-agent of a node: its service account,
// with a token bound to the node (impersonated here); node "" is a token
// bound to nothing.
func agentClient(t *testing.T, node string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(testEnv.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:kubext-system:kubext-ip-agent",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kubext-system", "system:authenticated"},
	}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The admission policy in config/policy/ip-agent.yaml lets an ip-agent
// speak for its own node only.
func TestAgentMaySpeakOnlyForItsOwnNode(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(testEnv.Apply(ctx, "config/policy/ip-agent.yaml")).To(Succeed())
	// The agent's permissions, as config/ip-agent/rbac.yaml grants them.
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-ip-agent"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"ip.kubext.io"}, Resources: []string{"ips"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"ip.kubext.io"}, Resources: []string{"ips/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-ip-agent"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "test-ip-agent"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "kubext-system", Name: "kubext-ip-agent"}}}
	for _, o := range []client.Object{role, binding} {
		g.Expect(k8s.Create(ctx, o)).To(Succeed())
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "policy-ip"}, Spec: ipv1.IPSpec{Address: "192.0.2.99"}}
	g.Expect(k8s.Create(ctx, ip)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ip) })
	// Nodes of their own: the agent the suite runs (for thisNode) must not
	// act on this IP.
	const nodeX, nodeY = "node-x", "node-y"
	ip.Status = ipv1.IPStatus{Address: "192.0.2.99", Node: nodeX, Pod: "default/app"}
	g.Expect(k8s.Status().Update(ctx, ip)).To(Succeed())

	setAttached := func(c client.Client, to string, also func(*ipv1.IP), opts ...client.SubResourcePatchOption) error {
		cur := &ipv1.IP{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: "policy-ip"}, cur); err != nil {
			return err
		}
		orig := cur.DeepCopy()
		cur.Status.AttachedNode = to
		if also != nil {
			also(cur)
		}
		return c.Status().Patch(ctx, cur, client.MergeFrom(orig), opts...)
	}
	other := agentClient(t, nodeY)
	// The policy takes a moment to load: wait (with dry runs, which change
	// nothing if they pass) until it refuses.
	g.Eventually(func() error { return setAttached(other, nodeY, nil, client.DryRunAll) }, waitFor, 100*time.Millisecond).Should(
		MatchError(ContainSubstring("the ip-agent of node node-y may only attach an IP placed on its own node")))

	own := agentClient(t, nodeX)
	g.Expect(setAttached(own, nodeX, func(ip *ipv1.IP) { ip.Status.Node = nodeY })).To(
		MatchError(ContainSubstring("may change only status.attachedNode")))
	g.Expect(setAttached(own, nodeX, nil)).To(Succeed())
	g.Expect(setAttached(other, "", nil)).To(MatchError(ContainSubstring("node-x -> <none>")), "another node cannot release it")
	g.Expect(setAttached(own, "", nil)).To(Succeed())

	// Its own Lease only.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubext-system"}}
	if err := k8s.Create(ctx, ns); err != nil {
		g.Expect(apierrors.IsAlreadyExists(err)).To(BeTrue(), err)
	}
	lease := func(name, holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kubext-system", Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
	}
	g.Expect(other.Create(ctx, lease("ip-agent-"+nodeX, nodeX))).To(MatchError(ContainSubstring("may only write its own heartbeat Lease ip-agent-node-y")))
	g.Expect(agentClient(t, "").Create(ctx, lease("ip-agent-"+nodeX, nodeX))).To(
		MatchError(ContainSubstring("the ip-agent's token is not bound to a node")), "a token without a node")
	g.Expect(own.Create(ctx, lease("ip-agent-"+nodeX, nodeX))).To(Succeed())
}
