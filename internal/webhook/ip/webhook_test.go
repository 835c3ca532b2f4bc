package ip

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/lab"
)

// k is a direct (uncached) client of the test API server.
var k client.Client

// TestMain starts an API server that calls the webhooks in
// config/webhook, served by a manager in this process. test/testenv has no
// webhook support, so the environment is built here.
func TestMain(m *testing.M) {
	if err := start(m); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func start(m *testing.M) error {
	root, err := lab.RepoRoot()
	if err != nil {
		return err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: filepath.Join(root, "bin", "k8s-"+lab.KubeVersion),
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join(root, "config", "webhook", "manifests.yaml")},
		},
	}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting envtest (run `make tools`?): %w", err)
	}
	defer func() { _ = env.Stop() }()

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(ipv1.AddToScheme(scheme))
	wio := &env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		}),
	})
	if err != nil {
		return err
	}
	if err := SetupWithManager(mgr); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	if k, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	// Admission fails open (failurePolicy Ignore): wait until the webhooks
	// are served, or the first tests would not reach them.
	started := mgr.GetWebhookServer().StartedChecker()
	for deadline := time.Now().Add(30 * time.Second); started(nil) != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the webhook server did not start: %w", started(nil))
		}
	}
	if code := m.Run(); code != 0 {
		return fmt.Errorf("tests failed (%d)", code)
	}
	return nil
}

// createEventually creates obj and expects the API server to refuse it
// with a message containing want, or to accept it when want is empty. It
// retries while the webhook's cache catches up with objects created just
// before, deleting obj again when it was accepted too early.
func createEventually(t *testing.T, obj client.Object, want string) {
	t.Helper()
	ctx := context.Background()
	NewWithT(t).Eventually(func(g Gomega) {
		o := obj.DeepCopyObject().(client.Object)
		err := k.Create(ctx, o)
		if want == "" {
			g.Expect(err).NotTo(HaveOccurred())
			return
		}
		if err == nil {
			g.Expect(k.Delete(ctx, o)).To(Succeed())
		}
		g.Expect(err).To(MatchError(ContainSubstring(want)))
	}, 10*time.Second, 200*time.Millisecond).Should(Succeed())
}

func newPool(name string, addresses ...string) *ipv1.IPPool {
	p := pool(name, addresses...)
	return &p
}

func TestWebhooks(t *testing.T) {
	t.Cleanup(func() {
		ctx := context.Background()
		_ = k.DeleteAllOf(ctx, &ipv1.IP{})
		_ = k.DeleteAllOf(ctx, &ipv1.IPPool{})
	})
	createEventually(t, newPool("partners", "198.51.100.0/24"), "")

	t.Run("overlapping pool is refused", func(t *testing.T) {
		createEventually(t, newPool("inner", "198.51.100.96/28"),
			`spec.addresses: 198.51.100.96/28 overlaps IPPool "partners" (198.51.100.0/24); an address can belong to one pool only`)
	})
	t.Run("a pool created right after one it overlaps is refused at once", func(t *testing.T) {
		// The pool webhook reads pools from the API server: the cache may
		// not have the first pool yet (a GitOps sync creates them back to
		// back). No retry here, five times over. (envtest's cache is
		// usually quick enough to hide the race; a loaded machine is not:
		// the deployed suite failed on it in CI.)
		g := NewWithT(t)
		ctx := context.Background()
		for i := range 5 {
			first := newPool(fmt.Sprintf("burst-%d", i), fmt.Sprintf("203.0.113.%d/29", 8*i))
			g.Expect(k.Create(ctx, first)).To(Succeed())
			second := newPool(fmt.Sprintf("burst-%d-overlap", i), fmt.Sprintf("203.0.113.%d/30", 8*i+4))
			err := k.Create(ctx, second)
			if err == nil {
				_ = k.Delete(ctx, second)
			}
			g.Expect(err).To(MatchError(ContainSubstring(fmt.Sprintf(`overlaps IPPool "burst-%d"`, i))), "round %d", i)
		}
	})
	t.Run("disjoint pool is accepted", func(t *testing.T) {
		createEventually(t, newPool("lab", "192.0.2.0/24"), "")
	})
	t.Run("pool growing into another is refused", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(func(g Gomega) {
			p := &ipv1.IPPool{}
			g.Expect(k.Get(context.Background(), client.ObjectKey{Name: "lab"}, p)).To(Succeed())
			p.Spec.Addresses = append(p.Spec.Addresses, "198.51.100.128/25")
			g.Expect(k.Update(context.Background(), p)).To(MatchError(ContainSubstring(
				`spec.addresses: 198.51.100.128/25 overlaps IPPool "partners" (198.51.100.0/24)`)))
		}, 10*time.Second, 200*time.Millisecond).Should(Succeed())
	})
	t.Run("IP outside its pool is refused", func(t *testing.T) {
		createEventually(t, ip("203.0.113.200", "partners"),
			`spec.address: 203.0.113.200 is not in IPPool "partners" (198.51.100.0/24)`)
	})
	t.Run("IP in no pool is refused", func(t *testing.T) {
		createEventually(t, ip("203.0.113.200", ""),
			`spec.address: 203.0.113.200 is in no IPPool; create one that contains it or name one in spec.pool`)
	})
	t.Run("an IP created right after its pool is accepted at once", func(t *testing.T) {
		// The IP webhook reads pools from the cache, and again from the
		// API server before it refuses: a pool and its IPs applied back to
		// back (a GitOps sync) must go in. No retry here, five times over
		// (the deployed suite failed on this in CI before the re-read).
		g := NewWithT(t)
		ctx := context.Background()
		for i := range 5 {
			pool := newPool(fmt.Sprintf("ipburst-%d", i), fmt.Sprintf("203.0.113.%d/29", 64+8*i))
			g.Expect(k.Create(ctx, pool)).To(Succeed())
			t.Cleanup(func() { _ = k.Delete(ctx, pool) })
			addr := ip(fmt.Sprintf("203.0.113.%d", 64+8*i+1), "")
			addr.Name = fmt.Sprintf("ipburst-%d", i)
			g.Expect(k.Create(ctx, addr)).To(Succeed(), "round %d", i)
			t.Cleanup(func() { _ = k.Delete(ctx, addr) })
		}
	})
	t.Run("IP naming a missing pool is accepted", func(t *testing.T) {
		i := ip("203.0.113.200", "later")
		i.Name = "waits-for-pool"
		createEventually(t, i, "")
	})
	t.Run("valid IP is accepted", func(t *testing.T) {
		i := ip("198.51.100.10", "")
		i.Name = "valid"
		createEventually(t, i, "")
	})
}
