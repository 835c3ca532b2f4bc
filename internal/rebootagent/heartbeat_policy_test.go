package rebootagent

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/internal/heartbeat/heartbeattest"
)

// The reboot-agent renews its own heartbeat Lease with its RBAC
// (config/reboot-agent/rbac.yaml, the Role) and nothing more: the admission
// policy in config/policy/reboot-agent.yaml refuses it another node's
// heartbeat (which would keep a dead agent's node approvable), the
// ip-agent's, a Lease held by another node, and the manager's leader Lease.
func TestAgentMayOnlyRenewItsOwnHeartbeat(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	const ns, own = "kubext-system", "lease-a"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		g.Expect(client.IgnoreAlreadyExists(err)).To(Succeed())
	}
	g.Expect(testEnv.Apply(ctx, "config/policy/reboot-agent.yaml")).To(Succeed())
	grantAgentHeartbeatRBAC(t, g, ns)

	agent, err := kubernetes.NewForConfig(agentConfig(own))
	g.Expect(err).NotTo(HaveOccurred())
	leases := agent.CoordinationV1().Leases(ns)
	lease := func(name, holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{heartbeat.LabelComponent: HeartbeatComponent}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &metav1.MicroTime{Time: time.Now()}},
		}
	}
	// The policy takes a moment to load: wait (with dry runs) until it
	// refuses.
	g.Eventually(func() error {
		_, err := leases.Create(ctx, lease("reboot-agent-lease-b", "lease-b"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}, waitFor, 100*time.Millisecond).Should(MatchError(ContainSubstring(
		"the reboot-agent of node lease-a may write only its own heartbeat Lease kubext-system/reboot-agent-lease-a, held by lease-a, not CREATE Lease kubext-system/reboot-agent-lease-b")))

	// Its own heartbeat, by the agent's heartbeat code.
	hb, err := heartbeat.New(heartbeat.Config{Client: heartbeattest.Typed(agent.CoordinationV1()), Namespace: ns, Component: HeartbeatComponent, Node: own,
		Duration: 3 * time.Second, RenewInterval: 200 * time.Millisecond})
	g.Expect(err).NotTo(HaveOccurred())
	hbCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = hb.Start(hbCtx) }()
	t.Cleanup(func() { stop(); <-done })
	g.Eventually(hb.Held, waitFor, 100*time.Millisecond).Should(BeTrue(), "the agent's own heartbeat was refused")

	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
	}{
		{"another node's heartbeat", lease("reboot-agent-lease-b", "lease-b")},
		{"another node's heartbeat held in its own name", lease("reboot-agent-lease-b", own)},
		{"the ip-agent's heartbeat", lease("ip-agent-lease-a", own)},
		{"the manager's leader Lease", lease("manager.kubext.io", own)},
	} {
		_, err := leases.Create(ctx, tc.lease, metav1.CreateOptions{})
		g.Expect(err).To(MatchError(ContainSubstring("may write only its own heartbeat Lease")), tc.name)
	}
	// Its own Lease, handed to another node.
	mine, err := leases.Get(ctx, "reboot-agent-"+own, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	mine.Spec.HolderIdentity = ptr.To("lease-b")
	_, err = leases.Update(ctx, mine, metav1.UpdateOptions{})
	g.Expect(err).To(MatchError(ContainSubstring("held by lease-a, not UPDATE")))
}

// grantAgentHeartbeatRBAC grants the agent's service account the rules of
// the Role in config/reboot-agent/rbac.yaml in namespace ns.
func grantAgentHeartbeatRBAC(t *testing.T, g Gomega, ns string) {
	t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "test-reboot-agent-heartbeat", Namespace: ns}, Rules: agentRules(g, "Role", "reboot-agent-heartbeat")}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-reboot-agent-heartbeat", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "kubext-reboot-agent"}}}
	createAll(t, g, role, binding)
}
