package deployed

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// A reboot through the deployed reboot-agent: the node's sentinel file
// (its /var/run/reboot-required, which the agent reads at
// /host/var/run/reboot-required) makes the agent ask; the deployed manager
// drains the node and orders the reboot; the agent signals the node's init
// (SIGRTMIN+5, as --reboot-method=signal does), and the node comes back
// with a new boot ID, uncordoned, its request answered.
func TestDeployedRebootThroughTheAgent(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	ctx := context.Background()
	c := adminClient(t)
	// A node that runs no manager replica: draining the node of the
	// leader itself (evicting it, under its PodDisruptionBudget, while it
	// drains) is a scenario of its own, not yet reliable in the lab (a
	// rollout that included it hung once); this test is about the agent.
	node := theLab.Nodes[len(theLab.Nodes)-1]
	for _, candidate := range slices.Backward(theLab.Nodes) {
		if podOf("controller-manager", candidate) == "" {
			node = candidate
			break
		}
	}
	n := &corev1.Node{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
	patch := client.MergeFrom(n.DeepCopy())
	n.Labels["kubext-e2e-reboot"] = "yes"
	g.Expect(c.Patch(ctx, n, patch)).To(Succeed())
	group := &rebootv1.RebootGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "deployed"},
		Spec: rebootv1.RebootGroupSpec{
			NodeSelector:         &metav1.LabelSelector{MatchLabels: map[string]string{"kubext-e2e-reboot": "yes"}},
			MaxUnavailable:       ptr.To(intstr.FromInt32(1)),
			SoakSeconds:          ptr.To[int32](1),
			RebootTimeoutSeconds: 120,
			Drain:                rebootv1.DrainSpec{TimeoutSeconds: 10},
		},
	}
	g.Expect(c.Create(ctx, group)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(ctx, group) })
	before, err := theLab.BootID(ctx, node)
	g.Expect(err).NotTo(HaveOccurred())
	agent := podOf("reboot-agent", node)
	g.Expect(agent).NotTo(BeEmpty())
	pid := deployed.Process(agent, "agent").PID()

	g.Expect(os.WriteFile(theLab.SentinelFile(node), nil, 0o644)).To(Succeed())
	g.Eventually(func(g Gomega) {
		id, err := theLab.BootID(ctx, node)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(id).NotTo(Equal(before), "not rebooted yet")
		got := &corev1.Node{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: node}, got)).To(Succeed())
		g.Expect(got.Spec.Unschedulable).To(BeFalse(), "still cordoned")
		for _, a := range []string{"reboot.kubext.io/needed", "reboot.kubext.io/now", "reboot.kubext.io/in-progress"} {
			g.Expect(got.Annotations).NotTo(HaveKey(a))
		}
	}, 3*time.Minute, time.Second).Should(Succeed())
	g.Expect(theLab.SentinelFile(node)).NotTo(BeAnExistingFile(), "a boot clears /var/run")
	// The reboot ended every process of the node; the agent runs again, a
	// new process.
	g.Eventually(func() int {
		if p := deployed.Process(agent, "agent"); p != nil {
			return p.PID()
		}
		return pid
	}, time.Minute, 250*time.Millisecond).ShouldNot(Equal(pid))
}
