package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/rebootlab"
)

// The reboot scenario needs more nodes than the package's lab and no
// network, so it brings up a lab of its own: 22 simulated nodes.
//
//   - pool-a: node-0..node-7, maxUnavailable 2. node-0 runs a pod whose
//     PodDisruptionBudget allows no disruption.
//   - pool-b: node-8..node-19, maxUnavailable 25% (3). node-19 is NotReady
//     for another reason before the rollout starts.
//   - pool-c: node-20, node-21, maxUnavailable 1, no agents (a node
//     deleted while it reboots keeps its slot until the reboot timeout).
//
// Two manager replicas run with leader election; the leader is SIGKILLed in
// the middle of the rollout.
func TestRollingRebootOnTheLab(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := lab.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	l, err := lab.Up(ctx, lab.Options{
		Name: "e2e-reboot", Prefix: "kxr", Nodes: 22,
		CRDDirs: []string{filepath.Join(root, "config", "crd", "bases")},
		Log:     t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Error(err)
		}
	})
	c := labClient(t, l)
	cs, err := l.Clientset()
	if err != nil {
		t.Fatal(err)
	}

	pool := func(i int) string {
		switch {
		case i < 8:
			return "a"
		case i < 20:
			return "b"
		default:
			return "c"
		}
	}
	for i, name := range l.Nodes {
		patchNode(t, c, name, func(n *corev1.Node) { n.Labels["pool"] = pool(i) })
	}
	makeRebootGroup(t, c, "pool-a", "a", intstr.FromInt32(2))
	makeRebootGroup(t, c, "pool-b", "b", intstr.FromString("25%"))
	makeRebootGroup(t, c, "pool-c", "c", intstr.FromInt32(1))
	obs, err := rebootlab.Observe(ctx, cs, func(n *corev1.Node) string {
		return map[string]string{"a": "pool-a", "b": "pool-b", "c": "pool-c"}[n.Labels["pool"]]
	}, map[string]int{"pool-a": 2, "pool-b": 3, "pool-c": 1})
	if err != nil {
		t.Fatal(err)
	}

	guardNode(ctx, t, c, "node-0")
	if err := l.FailNode(ctx, "node-19"); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitNodeReady(ctx, "node-19", false, time.Minute); err != nil {
		t.Fatal(err)
	}

	managerArgs := []string{"--controllers", "reboot", "--reboot-drain-backoff", "3s",
		"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms"}
	first, err := l.StartManager(ctx, "manager-1", managerArgs...)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(ctx, t, c)
	if _, err := l.StartManager(ctx, "manager-2", managerArgs...); err != nil {
		t.Fatal(err)
	}
	for _, node := range l.Nodes[:20] {
		if _, err := l.StartRebootAgent(ctx, node, l.RebootCommandArgs(node, time.Second)...); err != nil {
			t.Fatal(err)
		}
	}

	// Everybody asks at once, half through the sentinel file, half with
	// kubectl annotate.
	var asked []string
	for i, node := range l.Nodes[:19] {
		asked = append(asked, node)
		if i%2 == 0 {
			if err := os.WriteFile(l.SentinelFile(node), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		} else if out, err := l.Kubectl(ctx, "annotate", "node", node, rebootv1.AnnotationNeeded+"=true"); err != nil {
			t.Fatalf("kubectl annotate: %v: %s", err, out)
		}
	}

	// Kill the leader once a few reboots are through.
	waitFor(ctx, t, "four reboots verified", 3*time.Minute, func() bool { return finished(obs, asked) >= 4 })
	t.Logf("killing the leading manager (SIGKILL) with %d of %d reboots done", finished(obs, asked), len(asked))
	first.Kill()

	waitFor(ctx, t, "node-0's drain blocked and reported", 3*time.Minute, func() bool {
		g := &rebootv1.RebootGroup{}
		if err := c.Get(ctx, client.ObjectKey{Name: "pool-a"}, g); err != nil {
			return false
		}
		cond := meta.FindStatusCondition(g.Status.Conditions, rebootv1.ConditionDrainBlocked)
		return cond != nil && cond.Status == metav1.ConditionTrue &&
			strings.Contains(cond.Message, "PodDisruptionBudget default/guarded allows no disruption")
	})
	waitFor(ctx, t, "every other node rebooted", 5*time.Minute, func() bool { return finished(obs, asked[1:]) == len(asked)-1 })
	if n := obs.Node("node-0"); n.Spec.Unschedulable && n.Annotations[rebootv1.AnnotationInProgress] == "" {
		t.Error("node-0 is left cordoned between its drain attempts")
	}
	t.Log("removing the PodDisruptionBudget; node-0 goes on its next try")
	if err := c.Delete(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "node-0 rebooted", 3*time.Minute, func() bool { return finished(obs, asked[:1]) == 1 })

	for _, node := range asked {
		if got := obs.Reboots(node); got != 1 {
			t.Errorf("%s rebooted %d times, want exactly once", node, got)
		}
	}
	if got := obs.Reboots("node-19"); got != 0 {
		t.Errorf("node-19 (NotReady, not asking) rebooted %d times", got)
	}
	for _, v := range obs.Violations() {
		t.Error("budget exceeded: " + v)
	}
	t.Logf("most unavailable at once: pool-a %d of 2, pool-b %d of 3 (node-19 down throughout)",
		obs.MaxUnavailable("pool-a"), obs.MaxUnavailable("pool-b"))
	if obs.MaxUnavailable("pool-b") < 3 {
		t.Errorf("pool-b never had 3 unavailable: the NotReady node-19 should have used one of its slots")
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			t.Errorf("%s left cordoned", n.Name)
		}
	}

	// A node deleted while it reboots keeps its slot until its group's
	// reboot timeout (the machine may still be down), then frees it:
	// node-20 has no agent, so once ordered it would otherwise hold
	// pool-c's only slot for good.
	group := &rebootv1.RebootGroup{}
	if err := c.Get(ctx, client.ObjectKey{Name: "pool-c"}, group); err != nil {
		t.Fatal(err)
	}
	group.Spec.RebootTimeoutSeconds = 30
	if err := c.Update(ctx, group); err != nil {
		t.Fatal(err)
	}
	patchNode(t, c, "node-20", func(n *corev1.Node) {
		n.Annotations[rebootv1.AnnotationNeeded] = "true"
		n.Annotations[rebootv1.AnnotationNeededSince] = time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	})
	patchNode(t, c, "node-21", func(n *corev1.Node) { n.Annotations[rebootv1.AnnotationNeeded] = "true" })
	waitFor(ctx, t, "node-20 ordered to reboot", time.Minute, func() bool {
		n := obs.Node("node-20")
		return n != nil && n.Annotations[rebootv1.AnnotationNow] != ""
	})
	if n := obs.Node("node-21"); n.Annotations[rebootv1.AnnotationInProgress] != "" {
		t.Fatal("node-21 approved while node-20 holds pool-c's only slot")
	}
	approved, err := time.Parse(time.RFC3339, obs.Node("node-20").Annotations[rebootv1.AnnotationInProgress])
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-20"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "node-21 approved once node-20's reboot timeout has passed", 90*time.Second, func() bool {
		n := obs.Node("node-21")
		return n != nil && n.Annotations[rebootv1.AnnotationInProgress] != ""
	})
	got, err := time.Parse(time.RFC3339, obs.Node("node-21").Annotations[rebootv1.AnnotationInProgress])
	if err != nil {
		t.Fatal(err)
	}
	if got.Sub(approved) < 30*time.Second {
		t.Fatalf("node-21 approved %s after node-20, before node-20's 30s reboot timeout", got.Sub(approved))
	}
}

func labClient(t *testing.T, l *lab.Lab) client.Client {
	t.Helper()
	cfg, err := l.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := rebootv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func patchNode(t *testing.T, c client.Client, name string, change func(*corev1.Node)) {
	t.Helper()
	n := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	orig := n.DeepCopy()
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	change(n)
	if err := c.Patch(context.Background(), n, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

func makeRebootGroup(t *testing.T, c client.Client, name, pool string, maxUnavailable intstr.IntOrString) {
	t.Helper()
	g := &rebootv1.RebootGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: rebootv1.RebootGroupSpec{
			NodeSelector:         &metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}},
			MaxUnavailable:       &maxUnavailable,
			SoakSeconds:          ptr.To[int32](1),
			RebootTimeoutSeconds: 120,
			// The shortest drain timeout the API allows.
			Drain: rebootv1.DrainSpec{TimeoutSeconds: 30},
		},
	}
	if err := c.Create(context.Background(), g); err != nil {
		t.Fatal(err)
	}
}

// guardNode runs one pod on the node with a PodDisruptionBudget that allows
// no disruption of it, and waits until the disruption controller has said
// so in the budget's status.
func guardNode(ctx context.Context, t *testing.T, c client.Client, node string) {
	t.Helper()
	labels := map[string]string{"app": "guarded"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"kubernetes.io/hostname": node},
					Containers:   []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
				},
			},
		},
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
		},
	}
	for _, o := range []client.Object{dep, pdb} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(ctx, t, "the guarded pod running and its budget computed", 2*time.Minute, func() bool {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels(labels)); err != nil {
			return false
		}
		running := slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
			return p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning
		})
		got := &policyv1.PodDisruptionBudget{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pdb), got); err != nil {
			return false
		}
		return running && got.Status.ObservedGeneration == got.Generation && got.Status.CurrentHealthy == 1
	})
}

// waitLeader waits until a manager holds the leader-election Lease.
func waitLeader(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	waitFor(ctx, t, "a leader", time.Minute, func() bool {
		l := &coordinationv1.Lease{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: lab.SystemNamespace, Name: "manager.kubext.io"}, l); err != nil {
			return false
		}
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
	})
}

func finished(obs *rebootlab.Observer, nodes []string) int {
	done := 0
	for _, n := range nodes {
		if rebootlab.Finished(obs.Node(n)) {
			done++
		}
	}
	return done
}

func waitFor(ctx context.Context, t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	t.Logf("%s (%s)", what, time.Since(start).Round(100*time.Millisecond))
}
