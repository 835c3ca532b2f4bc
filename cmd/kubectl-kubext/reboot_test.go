package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/yaml"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// rebootNodes creates Ready nodes with the label pool=<pool>.
func rebootNodes(ctx context.Context, g Gomega, pool string, names ...string) {
	for _, name := range names {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": pool}}}
		g.Expect(k8s.Create(ctx, n)).To(Succeed())
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
		n.Status.NodeInfo.BootID = "boot-" + name
		g.Expect(k8s.Status().Update(ctx, n)).To(Succeed())
	}
}

// The reboot commands against a real API server: ask for reboots, plan,
// status, pause and resume (the default group without an object too). The
// nodes of this test are the only ones in the API server that ask for a
// reboot.
func TestReboot(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	rebootNodes(ctx, g, "rb", "rb-1", "rb-2", "rb-3")
	group := &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "rb"}, Spec: rebootv1.RebootGroupSpec{
		NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "rb"}},
		MaxUnavailable: ptr.To(intstr.FromInt32(2)),
	}}
	g.Expect(k8s.Create(ctx, group)).To(Succeed())

	out, _, err := kubectl(ctx, "reboot", "plan")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("No node needs a reboot.\n"))

	// A typo refuses everything: no node is marked.
	_, _, err = kubectl(ctx, "reboot", "rb-1", "rb-9")
	g.Expect(err).To(MatchError(`node "rb-9" not found (see: kubectl get nodes)`))
	g.Expect(annotation(ctx, g, "rb-1")).To(BeEmpty())

	out, _, err = kubectl(ctx, "reboot", "rb-1", "rb-2", "rb-3")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("node/rb-1 marked for reboot (reboot.kubext.io/needed=true)."))
	g.Expect(out).To(ContainSubstring("rb-3: group rb (3 nodes, maxUnavailable 2, unavailable now 0); needed: Waits (MaxUnavailable)"))
	g.Expect(out).To(ContainSubstring("Follow it with: kubectl kubext reboot status"))
	for _, n := range []string{"rb-1", "rb-2", "rb-3"} {
		g.Expect(annotation(ctx, g, n)).To(Equal("true"))
	}
	// Asking again changes nothing.
	rv := resourceVersion(ctx, g, "rb-1")
	out, _, err = kubectl(ctx, "reboot", "rb-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("node/rb-1 already asks for a reboot"))
	g.Expect(resourceVersion(ctx, g, "rb-1")).To(Equal(rv))

	out, _, err = kubectl(ctx, "reboot", "plan")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("Group rb: 3 nodes, maxUnavailable 2, unavailable now 0\n" +
		"  batch 1  now            rb-1 rb-2\n" +
		"  batch 2  after batch 1  rb-3\n"))

	// The controller approved rb-1 and ordered its reboot.
	now := time.Now().UTC().Format(time.RFC3339)
	patchAnnotations(ctx, g, "rb-1", map[string]any{
		rebootv1.AnnotationInProgress: now, rebootv1.AnnotationBootID: "boot-rb-1", rebootv1.AnnotationNow: now,
	})
	out, _, err = kubectl(ctx, "reboot", "status")
	g.Expect(err).NotTo(HaveOccurred())
	lines := strings.Split(out, "\n")
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"GROUP", "NODES", "MAX", "UNAVAILABLE", "UNAVAILABLE", "NEEDING", "REBOOTING", "DONE", "FAILED", "STUCK", "STATE", "CURRENT"}))
	g.Expect(out).To(MatchRegexp(`(?m)^rb\s+3\s+2\s+1\s+2\s+1\s+0\s+0\s+0\s+RollingOut\s+rb-1$`))
	g.Expect(out).To(MatchRegexp(`(?m)^rb-1\s+rb\s+Rebooting\s+.*still up in boot boot-rb-`))
	g.Expect(out).To(MatchRegexp(`(?m)^rb-3\s+rb\s+Needed\s+-\s+Waits \(MaxUnavailable\)`))

	// The same, for scripts.
	out, _, err = kubectl(ctx, "reboot", "status", "-o", "json")
	g.Expect(err).NotTo(HaveOccurred())
	var status struct {
		APIVersion, Kind string
		Groups           []struct {
			Name, State    string
			MaxUnavailable int
			Rebooting      []string
			Needing        int
		}
		Nodes []struct{ Node, Group, State, Detail string }
	}
	g.Expect(json.Unmarshal([]byte(out), &status)).To(Succeed(), out)
	g.Expect(status.APIVersion).To(Equal("plugin.kubext.io/v1alpha1"))
	g.Expect(status.Kind).To(Equal("RebootStatus"))
	g.Expect(status.Groups).To(ContainElement(SatisfyAll(
		HaveField("Name", "rb"), HaveField("State", "RollingOut"), HaveField("MaxUnavailable", 2),
		HaveField("Rebooting", []string{"rb-1"}), HaveField("Needing", 2))))
	g.Expect(status.Nodes).To(ContainElement(SatisfyAll(HaveField("Node", "rb-1"), HaveField("State", "Rebooting"))))
	out, _, err = kubectl(ctx, "reboot", "plan", "-o", "yaml")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(HavePrefix("apiVersion: plugin.kubext.io/v1alpha1\n"))
	g.Expect(out).To(ContainSubstring("kind: RebootPlan\n"))
	var plan struct {
		Groups []struct {
			Name         string
			RebootingNow []string `json:"rebootingNow"`
			Batches      []struct {
				Number int
				Nodes  []string
			}
		}
	}
	g.Expect(yaml.Unmarshal([]byte(out), &plan)).To(Succeed(), out)
	g.Expect(plan.Groups).To(ContainElement(SatisfyAll(HaveField("Name", "rb"), HaveField("RebootingNow", []string{"rb-1"}),
		// rb-1 holds one of the two slots: one node at a time.
		HaveField("Batches", Equal([]struct {
			Number int
			Nodes  []string
		}{{1, []string{"rb-2"}}, {2, []string{"rb-3"}}})))), out)
	_, _, err = kubectl(ctx, "reboot", "status", "-o", "xml")
	g.Expect(err).To(MatchError(ContainSubstring(`unknown output format "xml"`)))

	// Names complete from the cluster: groups for pause, nodes for a
	// request (not those already given).
	out, _, err = kubectl(ctx, "__complete", "reboot", "pause", "r")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Split(out, "\n")[0]).To(Equal("rb"))
	out, _, err = kubectl(ctx, "__complete", "reboot", "rb-1", "rb-")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("rb-2\nrb-3\n"))
	g.Expect(out).NotTo(ContainSubstring("rb-1\n"))

	// Cancel: an ordered reboot cannot be called back and nothing is
	// written; an approved one is withdrawn, a waiting one too.
	rv1 := resourceVersion(ctx, g, "rb-1")
	out, _, err = kubectl(ctx, "reboot", "cancel", "rb-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("node/rb-1: its reboot was ordered at " + now + " and cannot be called back"))
	g.Expect(resourceVersion(ctx, g, "rb-1")).To(Equal(rv1))
	patchAnnotations(ctx, g, "rb-2", map[string]any{rebootv1.AnnotationInProgress: now})
	out, _, err = kubectl(ctx, "reboot", "cancel", "rb-2", "rb-3")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("node/rb-2: reboot request withdrawn (reboot.kubext.io/needed=false); it was approved, so the controller stops its drain"))
	g.Expect(out).To(ContainSubstring("node/rb-3: reboot request withdrawn (reboot.kubext.io/needed=false); its agent does not ask again"))
	g.Expect(annotation(ctx, g, "rb-3")).To(Equal("false"))
	rv3 := resourceVersion(ctx, g, "rb-3")
	out, _, err = kubectl(ctx, "reboot", "cancel", "rb-3")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("node/rb-3 does not ask for a reboot (reboot.kubext.io/needed=false).\n"))
	g.Expect(resourceVersion(ctx, g, "rb-3")).To(Equal(rv3), "nothing to withdraw, nothing written")
	_, _, err = kubectl(ctx, "reboot", "cancel", "rb-3", "rb-9")
	g.Expect(err).To(MatchError(`node "rb-9" not found (see: kubectl get nodes)`))
	// Ask again, as before, for the rest of the test.
	patchAnnotations(ctx, g, "rb-2", map[string]any{rebootv1.AnnotationInProgress: nil, rebootv1.AnnotationNeeded: "true"})
	patchAnnotations(ctx, g, "rb-3", map[string]any{rebootv1.AnnotationNeeded: "true"})

	// Pause and resume a group.
	out, _, err = kubectl(ctx, "reboot", "pause", "rb")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("rebootgroup/rb paused.\n"))
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(group), group)).To(Succeed())
	g.Expect(group.Spec.Paused).To(BeTrue())
	out, _, err = kubectl(ctx, "reboot", "plan")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("Group rb: 3 nodes, maxUnavailable 2, unavailable now 1 (rb-1); Paused\n" +
		"  rebooting now        rb-1\n" +
		"  blocked        rb-2  Paused\n" +
		"  blocked        rb-3  Paused\n"))
	out, _, err = kubectl(ctx, "reboot", "pause", "rb")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("rebootgroup/rb is already paused.\n"))
	out, _, err = kubectl(ctx, "reboot", "resume", "rb")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("rebootgroup/rb resumed.\n"))
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(group), group)).To(Succeed())
	g.Expect(group.Spec.Paused).To(BeFalse())
	_, _, err = kubectl(ctx, "reboot", "pause", "no-such-group")
	g.Expect(err).To(MatchError(`RebootGroup "no-such-group" not found (see: kubectl get rebootgroups)`))

	// The implicit default group has no object until it is paused.
	out, _, err = kubectl(ctx, "reboot", "resume", "default")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("rebootgroup/default is not paused"))
	out, _, err = kubectl(ctx, "reboot", "pause", "default")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("rebootgroup/default created with the default settings, paused.\n"))
	def := &rebootv1.RebootGroup{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "default"}, def)).To(Succeed())
	g.Expect(def.Spec.Paused).To(BeTrue())
	g.Expect(def.Spec.NodeSelector).To(BeNil())
	out, _, err = kubectl(ctx, "reboot", "status")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(MatchRegexp(`(?m)^default\s+\d+\s+1\s+.*\sPaused\s+-$`))
	out, _, err = kubectl(ctx, "reboot", "resume", "default")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("rebootgroup/default resumed.\n"))
	g.Expect(k8s.Delete(ctx, def)).To(Succeed())
}

func annotation(ctx context.Context, g Gomega, node string) string {
	n := &corev1.Node{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
	return n.Annotations[rebootv1.AnnotationNeeded]
}

func resourceVersion(ctx context.Context, g Gomega, node string) string {
	n := &corev1.Node{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
	return n.ResourceVersion
}

// patchAnnotations sets annotations of the node, as the controller does.
func patchAnnotations(ctx context.Context, g Gomega, node string, ann map[string]any) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k8s.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
}

// Cancel as an operator with node patch rights, under the policy that
// keeps the reboot protocol's order annotations to the controller
// (config/policy/reboot-order.yaml): a request the controller has queued
// (needed-since) and one it has approved are both withdrawn. The command
// writes needed=false alone; the place in the queue is the controller's to
// forget.
func TestCancelAsAnOperator(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	g.Expect(env.Apply(ctx, "config/policy/reboot-order.yaml")).To(Succeed())
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-node-operator"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-node-operator"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "ops"}}}
	g.Expect(k8s.Create(ctx, role)).To(Succeed())
	g.Expect(k8s.Create(ctx, binding)).To(Succeed())
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), binding)
		_ = k8s.Delete(context.Background(), role)
	})
	rebootNodes(ctx, g, "cx", "cx-1", "cx-2")
	since := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	patchAnnotations(ctx, g, "cx-1", map[string]any{rebootv1.AnnotationNeeded: "true", rebootv1.AnnotationNeededSince: since})
	patchAnnotations(ctx, g, "cx-2", map[string]any{rebootv1.AnnotationNeeded: "true", rebootv1.AnnotationNeededSince: since,
		rebootv1.AnnotationInProgress: since, rebootv1.AnnotationBootID: "boot-cx-2"})
	operator := []string{"--as", "jane@example.com", "--as-group", "ops"}

	// The policy takes a moment to load: until the operator is refused an
	// order, a cancel proves nothing.
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "jane@example.com", Groups: []string{"ops"}}
	jane, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	order := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"x"}}}`, rebootv1.AnnotationNow))
	g.Eventually(func() error {
		return jane.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cx-1"}}, order, client.DryRunAll)
	}, 10*time.Second, 100*time.Millisecond).Should(MatchError(ContainSubstring("only the kubext reboot controller may set or change")))

	out, _, err := kubectl(ctx, append(operator, "reboot", "cancel", "cx-1", "cx-2")...)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("node/cx-1: reboot request withdrawn"))
	g.Expect(out).To(ContainSubstring("node/cx-2: reboot request withdrawn"))
	for _, name := range []string{"cx-1", "cx-2"} {
		n := &corev1.Node{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
		g.Expect(n.Annotations).To(HaveKeyWithValue(rebootv1.AnnotationNeeded, "false"), name)
		g.Expect(n.Annotations).To(HaveKeyWithValue(rebootv1.AnnotationNeededSince, since), name)
	}
}
