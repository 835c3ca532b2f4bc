// Package subset installs kubext with only some of its controllers, the way
// a user does with the chart's `controllers` value, and checks that the
// manager then holds only those controllers' rights: per-controller RBAC,
// generated from each controller's markers (config/rbac/controllers), is
// what the chart grants.
//
// It brings up a lab of its own (deployed mode: the install's manager runs
// as a process under its pod's service account, see lab.Install), since
// test/e2e's and test/e2e/deployed's labs run managers with every
// controller; `make test-e2e` runs the packages one after the other.
package subset

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	"github.com/kubext/kubext/test/lab"
)

// managerSA is the manager's service account as the chart names it for
// release kubext in kubext-system.
const managerSA = "system:serviceaccount:kubext-system:kubext-controller-manager"

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// The chart installed with `controllers: [redis]`: the manager runs the
// Redis controller alone, under its own service account bound to what the
// chart grants for it. A Redis becomes Ready (with the password the
// controller generates, which its members require), while the manager's
// identity may not patch nodes nor touch the IP controllers' objects, as
// the API server's own authorizer answers and as a real request shows.
func TestChartWithOnlyTheRedisController(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: deployed mode runs kubext's pods in network, mount and PID namespaces")
	}
	redis.SetLogger(quietRedis{})
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root, err := lab.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	helm := filepath.Join(root, "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("%s is missing: run `make helm`", helm)
	}

	start := time.Now()
	l, err := lab.Up(ctx, lab.Options{Name: "e2e-subset", Prefix: "kxsub", Nodes: 2, Network: true,
		Log: func(f string, a ...any) { t.Logf("lab: "+f, a...) }})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	kubectl := func(args ...string) (string, error) {
		out, err := l.Kubectl(ctx, args...)
		return strings.TrimSpace(string(out)), err
	}

	// The chart as a user renders it: the Redis controller only, no agents
	// (they serve the IP and reboot controllers), one manager replica.
	cmd := exec.CommandContext(ctx, helm, "template", "kubext", filepath.Join(root, "charts", "kubext"),
		"--namespace", lab.SystemNamespace, "--include-crds",
		"--set", "controllers={redis}", "--set", "manager.replicas=1", "--set", "manager.podDisruptionBudget.enabled=false",
		"--set", "agents.ipAgent.enabled=false", "--set", "agents.rebootAgent.enabled=false")
	cmd.Stderr = os.Stderr
	rendered, err := cmd.Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(rendered)).To(ContainSubstring("--controllers=redis"))
	manifest := filepath.Join(l.Dir, "install-redis-only.yaml")
	g.Expect(os.WriteFile(manifest, rendered, 0o644)).To(Succeed())
	// helm template renders no Namespace: the user makes it.
	g.Expect(l.EnsureNamespace(ctx, lab.SystemNamespace)).To(Succeed())
	d, err := l.Install(ctx, lab.InstallOptions{Manifest: manifest})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(d.Stop)
	_, err = l.StartPodNetwork(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("lab up and kubext (redis only) installed in %s", time.Since(start).Round(100*time.Millisecond))

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cachev1.AddToScheme(scheme))
	cfg, err := l.RESTConfig()
	g.Expect(err).NotTo(HaveOccurred())
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())

	// The Redis controller works: a Redis of two members becomes Ready.
	rd := &cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "subset-cache"}, Spec: cachev1.RedisSpec{Size: 2}}
	g.Expect(c.Create(ctx, rd)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), rd) })
	got := &cachev1.Redis{}
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(rd), got)).To(Succeed())
		ready := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionReady)
		g.Expect(ready).NotTo(BeNil(), "no Ready condition yet; errors of the install's pods: %v", d.Errors())
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "%s: %s", ready.Reason, ready.Message)
	}, 3*time.Minute, 250*time.Millisecond).Should(Succeed())
	t.Logf("Redis Ready %s after the install", time.Since(start).Round(100*time.Millisecond))

	// With the password the controller generated, which its members
	// require.
	ref := got.Status.PasswordSecretKeyRef
	g.Expect(ref).NotTo(BeNil())
	secret := &corev1.Secret{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: rd.Namespace, Name: ref.Name}, secret)).To(Succeed())
	g.Expect(metav1.IsControlledBy(secret, got)).To(BeTrue())
	primary := &corev1.Pod{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: rd.Namespace, Name: got.Status.Primary}, primary)).To(Succeed())
	addr := net.JoinHostPort(primary.Status.PodIP, "6379")
	anon := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1, DialTimeout: time.Second})
	g.Expect(anon.Ping(ctx).Err()).To(MatchError(ContainSubstring("NOAUTH")))
	_ = anon.Close()
	auth := redis.NewClient(&redis.Options{Addr: addr, Password: string(secret.Data[ref.Key]), Protocol: 2, DisableIdentity: true,
		MaxRetries: -1, DialTimeout: time.Second})
	g.Expect(auth.Set(ctx, "k", "v", 0).Err()).To(Succeed())
	_ = auth.Close()

	// What the manager's identity may do, as the API server's authorizer
	// answers for it: the Redis controller's rights, none of the others'.
	canI := func(verb, resource string, namespace ...string) string {
		args := []string{"auth", "can-i", verb, resource, "--as", managerSA}
		if len(namespace) > 0 {
			args = append(args, "-n", namespace[0])
		}
		out, _ := kubectl(args...) // "no" exits 1
		// The answer is the last line (a warning may come first, e.g.
		// that nodes are not namespaced).
		return out[strings.LastIndex(out, "\n")+1:]
	}
	for _, tc := range []struct{ verb, resource, want string }{
		// Controls: what the Redis controller uses.
		{"create", "statefulsets.apps", "yes"},
		{"patch", "pods", "yes"},
		{"create", "secrets", "yes"},
		{"list", "nodes", "yes"},
		// The reboot controller's node writes and the IP controllers'.
		{"patch", "nodes", "no"},
		{"update", "nodes", "no"},
		{"create", "ips.ip.kubext.io", "no"},
		{"delete", "ips.ip.kubext.io", "no"},
		{"patch", "ips.ip.kubext.io", "no"},
		{"patch", "ippools.ip.kubext.io", "no"},
		{"get", "rebootgroups.reboot.kubext.io", "no"},
		{"create", "deployments.apps", "no"},
	} {
		g.Expect(canI(tc.verb, tc.resource, "default")).To(Equal(tc.want), "can the manager %s %s", tc.verb, tc.resource)
	}
	// A real request under its identity is refused: a node relabelled.
	node := l.Nodes[0]
	out, err := kubectl("label", "node", node, "example.com/steered=yes", "--as", managerSA)
	g.Expect(err).To(HaveOccurred(), out)
	g.Expect(err.Error() + out).To(ContainSubstring(`cannot patch resource "nodes"`))
	n := &corev1.Node{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
	g.Expect(n.Labels).NotTo(HaveKey("example.com/steered"))
	// Its Secret create right makes no token: the chart's
	// manager-secret-writes policy, under the release's names, refuses it.
	forged := `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"minted","namespace":"default",` +
		`"annotations":{"kubernetes.io/service-account.name":"default"}},"type":"kubernetes.io/service-account-token"}`
	forgedFile := filepath.Join(l.Dir, "forged-secret.json")
	g.Expect(os.WriteFile(forgedFile, []byte(forged), 0o600)).To(Succeed())
	out, err = kubectl("create", "-f", forgedFile, "--as", managerSA)
	g.Expect(err).To(HaveOccurred(), out)
	g.Expect(err.Error() + out).To(ContainSubstring("the kubext manager may write only Opaque Secrets"))
	t.Logf("done %s after the start", time.Since(start).Round(100*time.Millisecond))
}
