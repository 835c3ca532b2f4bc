package main

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubext/kubext/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, func(_ context.Context, e *testenv.Env) error {
		env = e
		return nil
	})
}

// The agent refuses to start, saying what to install, until the admission
// policy that confines it to its own node is in force for it.
func TestCheckPolicy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	admin, err := client.New(env.Config, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	// The agent's RBAC as config/ip-agent/rbac.yaml has it, without a
	// kustomize overlay: service account ip-agent in namespace system.
	g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "system"}})).To(Succeed())
	g.Expect(env.Apply(ctx, "config/ip-agent/rbac.yaml")).To(Succeed())
	agent := func(extra map[string][]string) *rest.Config {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{
			UserName: "system:serviceaccount:system:ip-agent",
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:system", "system:authenticated"},
			Extra:    extra,
		}
		return cfg
	}
	onNode1 := agent(map[string][]string{"authentication.kubernetes.io/node-name": {"node-1"}})

	// No policy: the probe is accepted (once the RBAC has loaded).
	g.Eventually(func() error { return checkPolicy(ctx, onNode1, "system", "node-1", false) }, testenv.WaitFor, 100*time.Millisecond).Should(
		MatchError(ContainSubstring("the admission policy that confines the ip-agent to its own node is not in force")))
	err = checkPolicy(ctx, onNode1, "system", "node-1", false)
	g.Expect(err).To(MatchError(And(
		ContainSubstring("refusing to start"),
		ContainSubstring("the API server accepted a dry-run creation of Lease system/ip-agent-node-1-policy-probe"),
		ContainSubstring("Install config/policy/ip-agent.yaml"),
		ContainSubstring("--unsafe-skip-policy-check"))))
	t.Log(err)
	g.Expect(checkPolicy(ctx, onNode1, "system", "node-1", true)).To(Succeed(), "skipped")

	// The policy: in force once loaded.
	g.Expect(env.Apply(ctx, "config/policy/ip-agent.yaml")).To(Succeed())
	t.Cleanup(func() {
		for _, kind := range []string{"ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"} {
			_ = admin.Delete(context.Background(), &metav1.PartialObjectMetadata{
				TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: kind},
				ObjectMeta: metav1.ObjectMeta{Name: "ip-agent-own-node.ip.kubext.io"}})
		}
	})
	g.Eventually(func() error { return checkPolicy(ctx, onNode1, "system", "node-1", false) }, testenv.WaitFor, 100*time.Millisecond).Should(Succeed())

	// A token not bound to a node: the policy refuses, but not as it
	// refuses a Lease that is not the agent's own; the agent says so.
	err = checkPolicy(ctx, agent(nil), "system", "node-1", false)
	g.Expect(err).To(MatchError(And(
		ContainSubstring("an admission policy refused a dry-run creation of Lease system/ip-agent-node-1-policy-probe"),
		ContainSubstring("the ip-agent's token is not bound to a node"))))
	t.Log(err)
}
