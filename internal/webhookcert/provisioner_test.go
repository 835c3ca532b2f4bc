package webhookcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	ipwebhook "github.com/kubext/kubext/internal/webhook/ip"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/testenv"
)

// The names config/default gives the objects, which the manager's role
// names in its resourceNames.
const (
	ns          = "kubext-system"
	secretName  = "kubext-webhook-server-cert"
	vwcName     = "kubext-validating-webhook-configuration"
	managerSA   = "controller-manager"
	certLife    = 15 * time.Minute
	caLife      = 45 * time.Minute
	overlapsMsg = `overlaps IPPool "partners" (198.51.100.0/24); an address can belong to one pool only`
)

var (
	scheme = runtime.NewScheme()
	env    *testenv.Env
	admin  client.Client
	root   string
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(ipv1.AddToScheme(scheme))
}

func TestMain(m *testing.M) {
	testenv.Main(m, func(ctx context.Context, e *testenv.Env) error {
		env = e
		var err error
		if root, err = lab.RepoRoot(); err != nil {
			return err
		}
		if admin, err = client.New(e.Config, client.Options{Scheme: scheme}); err != nil {
			return err
		}
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
		// The manager's deployed permissions: config/rbac's generated role
		// (ClusterRole and the namespaced Role) and config/webhook's binding.
		return bindManagerRole(ctx, managerSA, nil)
	})
}

// bindManagerRole creates ServiceAccount sa, bound to config/rbac/role.yaml's
// rules (as "<sa>-role") after edit, which may change them.
func bindManagerRole(ctx context.Context, sa string, edit func([]rbacv1.PolicyRule) []rbacv1.PolicyRule) error {
	if err := admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}); err != nil {
		return err
	}
	f, err := os.Open(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		return err
	}
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}
	for {
		var doc struct {
			Kind  string              `json:"kind"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		rules := doc.Rules
		if edit != nil {
			rules = edit(rules)
		}
		name := sa + "-role"
		switch doc.Kind {
		case "ClusterRole":
			if err := errors.Join(
				admin.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}),
				admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}})); err != nil {
				return err
			}
		case "Role":
			if err := errors.Join(
				admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}),
				admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Subjects: subject,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}})); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unexpected %s in role.yaml", doc.Kind)
		}
	}
}

// as is the API server's configuration for ServiceAccount sa, the way a
// pod's token authenticates it.
func as(sa string) *rest.Config {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	return cfg
}

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newProvisioner(t *testing.T, c client.Client, clk *clock, port int) *Provisioner {
	return &Provisioner{
		Client:                c,
		Namespace:             ns,
		SecretName:            secretName,
		ServiceName:           "kubext-webhook-service",
		IPs:                   []net.IP{net.ParseIP("127.0.0.1")},
		WebhookConfigurations: []string{vwcName},
		CertDir:               t.TempDir(),
		ServerAddr:            net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		FailClosed:            true,
		CertLifetime:          certLife,
		CALifetime:            caLife,
		Now:                   clk.Now,
		Log:                   ctrl.Log.WithName("webhook-certificate"),
	}
}

// installWebhookConfiguration creates config/webhook's configuration, as
// config/default names it, calling https://127.0.0.1:port instead of the
// Service (the test's server is not behind one). Like the manifest it has
// no caBundle and failurePolicy Ignore.
func installWebhookConfiguration(ctx context.Context, g Gomega, port int) {
	data, err := os.ReadFile(filepath.Join(root, "config", "webhook", "manifests.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	g.Expect(yaml.Unmarshal(data, vwc)).To(Succeed())
	vwc.Name = vwcName
	for i := range vwc.Webhooks {
		w := &vwc.Webhooks[i]
		g.Expect(*w.FailurePolicy).To(Equal(admissionregistrationv1.Ignore), "the manifest installs failurePolicy Ignore")
		g.Expect(w.ClientConfig.CABundle).To(BeEmpty())
		url := fmt.Sprintf("https://127.0.0.1:%d%s", port, *w.ClientConfig.Service.Path)
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
	}
	g.Expect(admin.Create(ctx, vwc)).To(Succeed())
}

func freePort(g Gomega) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func failurePolicies(ctx context.Context, g Gomega) []admissionregistrationv1.FailurePolicyType {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: vwcName}, vwc)).To(Succeed())
	var out []admissionregistrationv1.FailurePolicyType
	for _, w := range vwc.Webhooks {
		out = append(out, *w.FailurePolicy)
	}
	return out
}

// trustedCAs is what the API server trusts for the webhooks: the caBundle
// of each of them, which must all be the same.
func trustedCAs(ctx context.Context, g Gomega) []*x509.Certificate {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: vwcName}, vwc)).To(Succeed())
	for _, w := range vwc.Webhooks[1:] {
		g.Expect(w.ClientConfig.CABundle).To(Equal(vwc.Webhooks[0].ClientConfig.CABundle))
	}
	cas, err := parseCerts(vwc.Webhooks[0].ClientConfig.CABundle)
	g.Expect(err).NotTo(HaveOccurred())
	return cas
}

func secretData(ctx context.Context, g Gomega) map[string][]byte {
	s := &corev1.Secret{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: secretName}, s)).To(Succeed())
	return s.Data
}

// served is the certificate the server on addr answers with.
func served(g Gomega, addr string) *x509.Certificate {
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // looking, not trusting
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

func fileCert(g Gomega, dir string) []byte {
	data, err := os.ReadFile(filepath.Join(dir, CertKey))
	g.Expect(err).NotTo(HaveOccurred())
	return data
}

// TestSelfProvisionedWebhooks runs the webhooks the way the manager does in
// a cluster: as the manager's ServiceAccount, with the certificate the
// provisioner issues, called by the real API server. The subtests build on
// each other and run in order.
func TestSelfProvisionedWebhooks(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port := freePort(g)
	installWebhookConfiguration(ctx, g, port)
	clk := &clock{now: time.Now()}
	cfg := as(managerSA)

	// Replica 1 runs the webhook server; replica 2 only provisions, to
	// check that the two agree.
	c1, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	p1 := newProvisioner(t, c1, clk, port)

	t.Run("two replicas starting at once converge on one CA and one certificate", func(t *testing.T) {
		g := NewWithT(t)
		// Both read "no Secret" before either creates it: the create race.
		var reached sync.WaitGroup
		reached.Add(2)
		var creates atomic.Int32
		racing := func() client.Client {
			base, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
			g.Expect(err).NotTo(HaveOccurred())
			return interceptor.NewClient(base, interceptor.Funcs{
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if creates.Add(1) <= 2 {
						reached.Done()
						reached.Wait()
					}
					return c.Create(ctx, obj, opts...)
				},
			})
		}
		a, b := newProvisioner(t, racing(), clk, port), newProvisioner(t, racing(), clk, port)
		errs := make(chan error, 2)
		for _, p := range []*Provisioner{a, b} {
			go func() { errs <- p.Ensure(ctx) }()
		}
		g.Expect(<-errs).To(Succeed())
		g.Expect(<-errs).To(Succeed())
		g.Expect(creates.Load()).To(BeEquivalentTo(2), "both replicas tried to create the Secret")

		cas, err := parseCerts(secretData(ctx, g)[CABundleKey])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cas).To(HaveLen(1))
		g.Expect(trustedCAs(ctx, g)).To(HaveLen(1))
		g.Expect(trustedCAs(ctx, g)[0].Equal(cas[0])).To(BeTrue())
		g.Expect(fileCert(g, a.CertDir)).To(Equal(fileCert(g, b.CertDir)))
		g.Expect(fileCert(g, a.CertDir)).To(Equal(secretData(ctx, g)[CertKey]))
		var m dto.Metric
		g.Expect(servingNotAfter.Write(&m)).To(Succeed())
		g.Expect(m.GetGauge().GetValue()).To(BeEquivalentTo(mustParse(g, fileCert(g, a.CertDir)).NotAfter.Unix()))
	})

	t.Run("nothing to change writes nothing", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(p1.Ensure(ctx)).To(Succeed())
		s, v := &corev1.Secret{}, &admissionregistrationv1.ValidatingWebhookConfiguration{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: secretName}, s)).To(Succeed())
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: vwcName}, v)).To(Succeed())
		g.Expect(p1.Ensure(ctx)).To(Succeed())
		g.Expect(p1.EnsureFailClosed(ctx)).NotTo(Succeed(), "no server yet")
		s2, v2 := &corev1.Secret{}, &admissionregistrationv1.ValidatingWebhookConfiguration{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: secretName}, s2)).To(Succeed())
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: vwcName}, v2)).To(Succeed())
		g.Expect(s2.ResourceVersion).To(Equal(s.ResourceVersion))
		g.Expect(v2.ResourceVersion).To(Equal(v.ResourceVersion))
	})

	t.Run("failurePolicy stays Ignore until the server answers with the certificate", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(trustedCAs(ctx, g)).NotTo(BeEmpty(), "the CA bundle is injected")
		err := p1.EnsureFailClosed(ctx)
		g.Expect(err).To(MatchError(ContainSubstring("does not answer with a certificate the webhook configurations trust")))
		g.Expect(failurePolicies(ctx, g)).To(HaveEach(admissionregistrationv1.Ignore))

		// A server with a certificate the bundle does not verify does not
		// count either.
		other, err := newCA(time.Now(), caLife)
		g.Expect(err).NotTo(HaveOccurred())
		foreign, err := newServing(other, time.Now(), certLife, p1.DNSNames(), p1.IPs)
		g.Expect(err).NotTo(HaveOccurred())
		pair, err := tls.X509KeyPair(foreign.certPEM, foreign.keyPEM)
		g.Expect(err).NotTo(HaveOccurred())
		l, err := tls.Listen("tcp", p1.ServerAddr, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
		g.Expect(err).NotTo(HaveOccurred())
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				_ = conn.(*tls.Conn).Handshake()
				_ = conn.Close()
			}
		}()
		err = p1.EnsureFailClosed(ctx)
		_ = l.Close()
		g.Expect(err).To(MatchError(ContainSubstring("certificate signed by unknown authority")))
		g.Expect(failurePolicies(ctx, g)).To(HaveEach(admissionregistrationv1.Ignore))
	})

	// The manager, as deployed: its identity, its webhooks, the cert dir
	// replica 1 provisioned.
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:        scheme,
		Metrics:       metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: p1.CertDir}),
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ipwebhook.SetupWithManager(mgr)).To(Succeed())
	testenv.StartManager(ctx, mgr)

	t.Run("failurePolicy flips to Fail once the server answers with the certificate", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(func() error { return p1.EnsureFailClosed(ctx) }, 30*time.Second, 200*time.Millisecond).Should(Succeed())
		g.Expect(failurePolicies(ctx, g)).To(HaveEach(admissionregistrationv1.Fail))
	})

	t.Run("the API server calls the webhook and an overlapping IPPool is refused with its message", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(admin.Create(ctx, &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "partners"},
			Spec: ipv1.IPPoolSpec{Addresses: []string{"198.51.100.0/24"}}})).To(Succeed())
		g.Eventually(refusedByWebhook, 10*time.Second, 200*time.Millisecond).Should(Succeed())
	})

	t.Run("rotation issues new certificates and requests keep succeeding across it", func(t *testing.T) {
		g := NewWithT(t)
		var ok, failed atomic.Int64
		var lastErr atomic.Value
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := refusedByWebhook(); err != nil {
					failed.Add(1)
					lastErr.Store(err.Error())
				} else {
					ok.Add(1)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		stopRequests := func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
			<-done
		}
		defer stopRequests()

		rotate := func(by time.Duration) *x509.Certificate {
			before := served(g, p1.ServerAddr)
			clk.Advance(by)
			g.Expect(p1.Ensure(ctx)).To(Succeed())
			var now *x509.Certificate
			g.Eventually(func() bool {
				now = served(g, p1.ServerAddr)
				return !now.Equal(before)
			}, 30*time.Second, 100*time.Millisecond).Should(BeTrue(), "certwatcher picks up the new certificate")
			g.Expect(now.Raw).To(Equal(mustParse(g, secretData(ctx, g)[CertKey]).Raw))
			time.Sleep(time.Second) // requests against the new certificate
			return now
		}
		// The serving certificate at two thirds of its life.
		first := served(g, p1.ServerAddr)
		second := rotate(11 * time.Minute)
		g.Expect(second.Issuer.String()).To(Equal(first.Issuer.String()), "same CA")
		third := rotate(11 * time.Minute)
		g.Expect(trustedCAs(ctx, g)).To(HaveLen(1))
		before := &corev1.Secret{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: secretName}, before)).To(Succeed())

		// The CA at two thirds of its life: the new CA joins the bundle next
		// to the old one, then the serving certificate is re-issued by it.
		fourth := rotate(9 * time.Minute)
		g.Expect(fourth.Issuer.String()).NotTo(Equal(third.Issuer.String()), "issued by the new CA")
		cas := trustedCAs(ctx, g)
		g.Expect(cas).To(HaveLen(2))
		g.Expect(signedBy(fourth, cas[0])).To(BeTrue())
		g.Expect(signedBy(third, cas[1])).To(BeTrue(), "the old CA stays trusted while certificates it signed may be served")

		// A replica that read the Secret just before the CA rotation (its
		// clock a little behind: the old CA not due yet) and injects after
		// it must not take the new CA out of the bundle, or replica 1's
		// new certificate would stop verifying.
		stale, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
		g.Expect(err).NotTo(HaveOccurred())
		var staleReads atomic.Int32
		staleClient := interceptor.NewClient(stale, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if s, ok := obj.(*corev1.Secret); ok && staleReads.Add(1) == 1 {
					before.DeepCopyInto(s)
					return nil
				}
				return c.Get(ctx, key, obj, opts...)
			},
		})
		staleClock := &clock{now: clk.Now().Add(-2 * time.Minute)}
		pStale := newProvisioner(t, staleClient, staleClock, port)
		g.Expect(pStale.Ensure(ctx)).To(Succeed())
		g.Expect(fileCert(g, pStale.CertDir)).To(Equal(pemOf(third)), "it serves the older certificate, still trusted")
		g.Expect(trustedCAs(ctx, g)).To(HaveLen(2))
		time.Sleep(time.Second) // requests against replica 1 after the stale replica's sync

		// Replica 2, which read the Secret before all this, catches up
		// without taking anything out of the bundle.
		c2, err := client.New(cfg, client.Options{Scheme: scheme})
		g.Expect(err).NotTo(HaveOccurred())
		p2 := newProvisioner(t, c2, clk, port)
		g.Expect(p2.Ensure(ctx)).To(Succeed())
		g.Expect(fileCert(g, p2.CertDir)).To(Equal(fileCert(g, p1.CertDir)))
		g.Expect(trustedCAs(ctx, g)).To(HaveLen(2))

		// Once the old CA has expired it leaves the bundle.
		rotate(15 * time.Minute)
		g.Expect(trustedCAs(ctx, g)).To(HaveLen(1))

		stopRequests()
		g.Expect(failed.Load()).To(BeZero(), "requests failed across the rotation: %v", lastErr.Load())
		g.Expect(ok.Load()).To(BeNumerically(">", 20))
	})

	t.Run("a forged or corrupt Secret is replaced and never served", func(t *testing.T) {
		current := secretData(ctx, NewWithT(t))
		caPair, err := parseKeyPair(current[CABundleKey], current[CAKeyKey])
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		attacker, err := newCA(clk.Now(), caLife)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		attackerCert, err := newServing(attacker, clk.Now(), certLife, p1.DNSNames(), p1.IPs)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		expired, err := newServing(caPair, clk.Now().Add(-2*certLife), certLife, p1.DNSNames(), p1.IPs)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		wrongNames, err := newServing(caPair, clk.Now(), certLife, []string{"evil.example.com"}, nil)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		other, err := newServing(caPair, clk.Now(), certLife, p1.DNSNames(), p1.IPs)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())

		for _, tc := range []struct {
			name   string
			forged map[string][]byte
		}{
			{"garbage everywhere", map[string][]byte{CABundleKey: []byte("garbage"), CAKeyKey: []byte("garbage"),
				CertKey: []byte("garbage"), KeyKey: []byte("garbage")}},
			{"serving key that is not the certificate's", map[string][]byte{CertKey: current[CertKey], KeyKey: other.keyPEM}},
			{"expired serving certificate", map[string][]byte{CertKey: expired.certPEM, KeyKey: expired.keyPEM}},
			{"serving certificate for other names", map[string][]byte{CertKey: wrongNames.certPEM, KeyKey: wrongNames.keyPEM}},
			{"serving certificate from another CA", map[string][]byte{CertKey: attackerCert.certPEM, KeyKey: attackerCert.keyPEM}},
			{"CA key that is not the CA's", map[string][]byte{CABundleKey: attacker.certPEM, CAKeyKey: caPair.keyPEM,
				CertKey: attackerCert.certPEM, KeyKey: attackerCert.keyPEM}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				g := NewWithT(t)
				s := &corev1.Secret{}
				g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: secretName}, s)).To(Succeed())
				orig := s.DeepCopy()
				for k, v := range tc.forged {
					s.Data[k] = v
				}
				g.Expect(admin.Patch(ctx, s, client.MergeFrom(orig))).To(Succeed())

				g.Expect(p1.Ensure(ctx)).To(Succeed())
				fixed := secretData(ctx, g)
				served := fileCert(g, p1.CertDir)
				g.Expect(served).To(Equal(fixed[CertKey]))
				for _, bad := range [][]byte{tc.forged[CertKey], attackerCert.certPEM, expired.certPEM, wrongNames.certPEM} {
					if len(bad) > 0 && !bytes.Equal(bad, current[CertKey]) {
						g.Expect(served).NotTo(Equal(bad))
					}
				}
				// What is served is what the API server verifies, and the
				// attacker's CA is trusted nowhere.
				cas := trustedCAs(ctx, g)
				g.Expect(verifyServing(mustParse(g, served), cas, clk.Now(), p1.DNSNames(), p1.IPs)).To(Succeed())
				g.Expect(containsCert(cas, attacker.cert)).To(BeFalse())
				bundle, err := parseCerts(fixed[CABundleKey])
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(containsCert(bundle, attacker.cert)).To(BeFalse())
				_, err = parseKeyPair(fixed[CABundleKey], fixed[CAKeyKey])
				g.Expect(err).NotTo(HaveOccurred())
				g.Eventually(refusedByWebhook, 20*time.Second, 200*time.Millisecond).Should(Succeed())
				current = fixed
			})
		}
	})

	t.Run("the Secret deleted and a replica killed halfway: nothing untrusted is served, the next sync finishes", func(t *testing.T) {
		g := NewWithT(t)
		oldServed := fileCert(g, p1.CertDir)
		g.Expect(admin.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName}})).To(Succeed())
		// A replica that dies after publishing a new CA in the Secret and
		// before injecting it.
		base, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
		g.Expect(err).NotTo(HaveOccurred())
		dying := interceptor.NewClient(base, interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if _, ok := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok {
					return errors.New("killed")
				}
				return c.Patch(ctx, obj, patch, opts...)
			},
		})
		pDying := newProvisioner(t, dying, clk, port)
		g.Expect(pDying.Ensure(ctx)).To(MatchError(ContainSubstring("killed")))
		_, statErr := os.Stat(filepath.Join(pDying.CertDir, CertKey))
		g.Expect(os.IsNotExist(statErr)).To(BeTrue(), "it served nothing")
		newCAs, err := parseCerts(secretData(ctx, g)[CABundleKey])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(newCAs).To(HaveLen(1))
		g.Expect(containsCert(trustedCAs(ctx, g), newCAs[0])).To(BeFalse())
		// Replica 1 still serves its certificate, whose CA stays trusted.
		g.Expect(refusedByWebhook()).To(Succeed())

		g.Expect(p1.Ensure(ctx)).To(Succeed())
		g.Expect(containsCert(trustedCAs(ctx, g), newCAs[0])).To(BeTrue())
		g.Expect(fileCert(g, p1.CertDir)).NotTo(Equal(oldServed))
		g.Eventually(func() bool { return signedBy(served(g, p1.ServerAddr), newCAs[0]) }, 30*time.Second, 100*time.Millisecond).
			Should(BeTrue())
		g.Expect(refusedByWebhook()).To(Succeed())
	})

	t.Run("upgrade: re-applying the manifest server-side resets Ignore, the manager restores Fail", func(t *testing.T) {
		g := NewWithT(t)
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: vwcName}, v)).To(Succeed())
		manifest := &admissionregistrationv1.ValidatingWebhookConfiguration{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
			ObjectMeta: metav1.ObjectMeta{Name: vwcName},
		}
		for _, w := range v.Webhooks {
			w.ClientConfig.CABundle = nil // not in the manifest
			ignore := admissionregistrationv1.Ignore
			w.FailurePolicy = &ignore
			manifest.Webhooks = append(manifest.Webhooks, w)
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(manifest)
		g.Expect(err).NotTo(HaveOccurred())
		apply := func(opts ...client.ApplyOption) error {
			return admin.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u}),
				append(opts, client.FieldOwner("kubectl"))...)
		}
		g.Expect(apply()).To(MatchError(ContainSubstring("conflict")), "the manager owns failurePolicy")
		g.Expect(apply(client.ForceOwnership)).To(Succeed())
		g.Expect(failurePolicies(ctx, g)).To(HaveEach(admissionregistrationv1.Ignore))
		g.Expect(trustedCAs(ctx, g)).NotTo(BeEmpty(), "the bundle, not in the manifest, stays")
		g.Expect(p1.Ensure(ctx)).To(Succeed())
		g.Expect(p1.EnsureFailClosed(ctx)).To(Succeed())
		g.Expect(failurePolicies(ctx, g)).To(HaveEach(admissionregistrationv1.Fail))
	})

	t.Run("a manager that may not patch the webhook configuration says so and serves nothing", func(t *testing.T) {
		g := NewWithT(t)
		const sa = "no-webhook-patch"
		g.Expect(bindManagerRole(ctx, sa, func(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
			var out []rbacv1.PolicyRule
			for _, r := range rules {
				if r.Resources[0] == "validatingwebhookconfigurations" {
					r.Verbs = []string{"get"}
				}
				out = append(out, r)
			}
			return out
		})).To(Succeed())
		// A reinstalled configuration, without the bundle: it must be patched.
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: vwcName}, v)).To(Succeed())
		orig := v.DeepCopy()
		for i := range v.Webhooks {
			v.Webhooks[i].ClientConfig.CABundle = nil
			ignore := admissionregistrationv1.Ignore
			v.Webhooks[i].FailurePolicy = &ignore
		}
		g.Expect(admin.Patch(ctx, v, client.MergeFrom(orig))).To(Succeed())

		c, err := client.New(as(sa), client.Options{Scheme: scheme})
		g.Expect(err).NotTo(HaveOccurred())
		p := newProvisioner(t, c, clk, port)
		err = p.Ensure(ctx)
		g.Expect(err).To(MatchError(ContainSubstring(
			"the manager may not patch ValidatingWebhookConfiguration " + vwcName)))
		g.Expect(Permanent(err)).To(BeTrue())
		_, statErr := os.Stat(filepath.Join(p.CertDir, CertKey))
		g.Expect(os.IsNotExist(statErr)).To(BeTrue(), "nothing is served without a bundle that verifies it")

		// The real manager's role puts it right again.
		g.Expect(p1.Ensure(ctx)).To(Succeed())
		g.Expect(p1.EnsureFailClosed(ctx)).To(Succeed())
		g.Expect(failurePolicies(ctx, g)).To(HaveEach(admissionregistrationv1.Fail))
		g.Eventually(refusedByWebhook, 10*time.Second, 200*time.Millisecond).Should(Succeed())
	})
}

// refusedByWebhook creates (dry-run) a pool overlapping "partners" and
// says why the result is not the webhook's refusal: a refusal with the
// webhook's message proves the API server called it and verified its
// certificate (with failurePolicy Fail, a TLS failure is another error).
func refusedByWebhook() error {
	err := admin.Create(context.Background(), &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "inner"},
		Spec: ipv1.IPPoolSpec{Addresses: []string{"198.51.100.96/28"}}}, client.DryRunAll)
	if err == nil {
		return errors.New("an overlapping pool was accepted")
	}
	if !strings.Contains(err.Error(), overlapsMsg) {
		return err
	}
	return nil
}

func mustParse(g Gomega, data []byte) *x509.Certificate {
	cs, err := parseCerts(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cs).NotTo(BeEmpty())
	return cs[0]
}
