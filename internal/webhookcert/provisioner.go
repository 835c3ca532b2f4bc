// Package webhookcert lets the manager provision and rotate the serving
// certificate of its own webhook server, with no cert-manager.
//
// One Secret in the manager's namespace holds a CA bundle (ca.crt: the
// current CA first, then older CAs until they expire), the current CA's key
// (ca.key) and one serving certificate for the webhook Service's DNS names
// (tls.crt, tls.key) shared by every replica. Each replica (leader or not:
// they all serve webhooks) keeps it current, injects the CAs into kubext's
// ValidatingWebhookConfigurations, writes the serving pair into the webhook
// server's certificate directory, where controller-runtime's certwatcher
// picks it up, and switches the configurations to failurePolicy Fail once
// its own server answers with a certificate the configurations' bundle
// verifies.
//
// # Why no replica serves a certificate the API server cannot verify
//
// The API server verifies the webhook's certificate against the caBundle
// of the webhook configuration. Three rules keep every served certificate
// under a CA in that bundle, however many replicas run and however stale
// their view:
//
//  1. The bundle in a webhook configuration only grows, except for CAs that
//     have expired. A replica merges the Secret's CAs into what the
//     configuration already holds and never removes an unexpired one, so a
//     replica with an older view of the Secret cannot take out a CA that a
//     newer serving certificate needs. A serving certificate never outlives
//     its CA, so an expired CA verifies nothing anyone serves (and since
//     certificates are replaced with a third of their life left, clock skew
//     between replicas and the API server never comes near that edge).
//  2. A serving certificate is issued by the current CA only after a fresh
//     read (or the response of our own patch) of every configuration shows
//     that CA in its bundle. A new CA therefore first joins the bundle next
//     to the old one while the old serving certificate stays in use; only
//     then is the serving certificate re-issued.
//  3. A replica writes a serving certificate into its certificate directory
//     only after checking, against configurations it has just read or
//     patched, that their bundle verifies it for the Service's names. So
//     even a certificate someone else put in the Secret is never served
//     unless the API server can verify it; by rule 1 it stays verifiable.
//
// Replicas converge on one Secret: the first create wins (the others get
// AlreadyExists and re-read), and every change is a patch carrying the
// resourceVersion it was computed from (a Conflict makes the replica
// re-read and start over), so no replica overwrites a CA another replica
// has already published. Content that cannot be used (garbage, a key that
// does not match its certificate, an expired or not-yet-valid certificate,
// one that is not for the Service's names or not signed by the bundle's
// CA) is replaced, never served and never injected.
//
// Whoever can write the Secret or the webhook configuration can make the
// API server trust their CA: both are guarded by RBAC (the manager's role
// may touch only these objects, by name).
package webhookcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The Secret's keys.
const (
	// CABundleKey holds every CA the webhook configurations must trust,
	// the current one first.
	CABundleKey = "ca.crt"
	// CAKeyKey holds the current CA's private key.
	CAKeyKey = "ca.key"
	// CertKey and KeyKey hold the serving certificate and its key; the
	// certificate directory gets them under the same names.
	CertKey = corev1.TLSCertKey
	// KeyKey is the serving certificate's private key.
	KeyKey = corev1.TLSPrivateKeyKey
)

// Defaults for Provisioner's lifetimes. A certificate is replaced when a
// third of its lifetime is left (after 60 of 90 days), which leaves a month
// to retry in; the CA's lifetime must be at least three serving
// certificates', so that one issued just before the CA's rotation never
// outlives it.
const (
	DefaultCertLifetime = 90 * 24 * time.Hour
	DefaultCALifetime   = 3 * 365 * 24 * time.Hour
)

// RBAC for the provisioner. The names are those config/default gives the
// objects (namePrefix kubext-); get and patch are limited to them. create
// cannot be: the authorizer decides a create before the object, and so its
// name, is known, so a resourceNames rule never matches a create. That
// grant is therefore namespaced (a Role in the manager's namespace only).
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=create
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=get;patch,resourceNames=kubext-webhook-server-cert
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;patch,resourceNames=kubext-validating-webhook-configuration

// Provisioner keeps the webhook server's certificate and the webhook
// configurations' CA bundle current. Its client must read straight from
// the API server (not a cache: the manager may only get these objects by
// name, and rule 2 of the package comment needs fresh reads).
type Provisioner struct {
	Client client.Client
	// Namespace and SecretName name the Secret.
	Namespace, SecretName string
	// ServiceName is the webhook Service; the certificate is for
	// <ServiceName>.<Namespace>.svc and .svc.cluster.local.
	ServiceName string
	// IPs are extra subject alternative names, for tests that reach the
	// server on 127.0.0.1; none in a cluster.
	IPs []net.IP
	// WebhookConfigurations are the names of the ValidatingWebhookConfigurations
	// whose caBundle the provisioner injects and whose failurePolicy it
	// switches to Fail.
	WebhookConfigurations []string
	// CertDir is the webhook server's certificate directory.
	CertDir string
	// ServerAddr is where this replica's webhook server listens, e.g.
	// 127.0.0.1:9443, for the check that it answers with a certificate the
	// API server verifies.
	ServerAddr string
	// FailClosed switches the configurations' webhooks to failurePolicy
	// Fail once this replica serves a verified certificate.
	FailClosed bool
	// CertLifetime and CALifetime default to DefaultCertLifetime and
	// DefaultCALifetime; CALifetime must be at least three CertLifetimes.
	CertLifetime, CALifetime time.Duration
	// Now is the clock (time.Now by default); tests move it forward.
	Now func() time.Time
	// Resync is how often the runnable checks again (default a minute).
	Resync time.Duration
	Log    logr.Logger

	mu      sync.Mutex
	trusted []*x509.Certificate // the bundle every configuration held at the last sync
}

// DNSNames are the names the serving certificate is for.
func (p *Provisioner) DNSNames() []string {
	svc := p.ServiceName + "." + p.Namespace + ".svc"
	return []string{svc, svc + ".cluster.local"}
}

func (p *Provisioner) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Provisioner) lifetimes() (cert, ca time.Duration) {
	cert, ca = p.CertLifetime, p.CALifetime
	if cert == 0 {
		cert = DefaultCertLifetime
	}
	if ca == 0 {
		ca = DefaultCALifetime
	}
	return cert, ca
}

// ErrConfigurationMissing means a webhook configuration to inject into
// does not exist.
var ErrConfigurationMissing = errors.New("webhook configuration not found")

// Permanent says whether err is one that retrying will not fix: a
// permission the manager lacks or a missing webhook configuration.
func Permanent(err error) bool {
	return apierrors.IsForbidden(err) || errors.Is(err, ErrConfigurationMissing)
}

// errRetry means another replica changed an object between our read and
// our write: read again.
var errRetry = errors.New("changed concurrently")

// Ensure brings the Secret, the configurations' CA bundle and the
// certificate directory up to date, in the order the package comment
// explains. It writes nothing when all is current.
func (p *Provisioner) Ensure(ctx context.Context) error {
	if cert, ca := p.lifetimes(); ca < 3*cert {
		return fmt.Errorf("the CA lifetime (%s) must be at least three serving certificate lifetimes (%s)", ca, cert)
	}
	var err error
	for range 10 {
		if err = p.ensureOnce(ctx); !errors.Is(err, errRetry) {
			return err
		}
	}
	return err
}

func (p *Provisioner) ensureOnce(ctx context.Context) error {
	now := p.now()
	certLife, caLife := p.lifetimes()
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: p.Namespace, Name: p.SecretName}
	if err := p.Client.Get(ctx, key, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return p.explain(err, "get", "Secret", key.String())
		}
		secret = nil
	}
	st := p.load(secret, now)

	// Step 1: a usable current CA, older unexpired CAs kept behind it.
	if st.ca == nil || due(st.ca.cert, now, caLife) {
		ca, err := newCA(now, caLife)
		if err != nil {
			return err
		}
		p.Log.Info("Issuing a webhook CA", "reason", st.caProblem, "notAfter", ca.cert.NotAfter)
		st.bundle = append([]*x509.Certificate{ca.cert}, st.bundle...)
		st.ca = ca
		if err := p.writeSecret(ctx, secret, st); err != nil {
			return err
		}
		return errRetry // start over from what the API server now holds
	}

	// Step 2: every configuration trusts the bundle (rule 1).
	trusted, err := p.inject(ctx, st.bundle, now)
	if err != nil {
		return err
	}

	// Step 3: a serving certificate from the current CA, issued only once
	// the configurations trust that CA (rule 2).
	if st.serving == nil || due(st.serving.cert, now, certLife) || !signedBy(st.serving.cert, st.ca.cert) {
		if !containsCert(trusted, st.ca.cert) {
			return fmt.Errorf("the webhook configurations do not trust the current CA yet")
		}
		reason := "renewal"
		if st.serving == nil {
			reason = st.servingProblem
		}
		serving, err := newServing(st.ca, now, certLife, p.DNSNames(), p.IPs)
		if err != nil {
			return err
		}
		p.Log.Info("Issuing a webhook serving certificate", "reason", reason, "notAfter", serving.cert.NotAfter)
		st.serving = serving
		if err := p.writeSecret(ctx, secret, st); err != nil {
			return err
		}
		return errRetry
	}

	// Step 4: serve it, if and only if the API server can verify it (rule 3).
	if err := verifyServing(st.serving.cert, trusted, now, p.DNSNames(), p.IPs); err != nil {
		return fmt.Errorf("not serving the certificate in Secret %s: the webhook configurations' CA bundle does not verify it: %w", key, err)
	}
	if err := p.writeFiles(st.serving); err != nil {
		return err
	}
	servingNotAfter.Set(float64(st.serving.cert.NotAfter.Unix()))
	return nil
}

// state is what the Secret holds that can be used.
type state struct {
	bundle         []*x509.Certificate // unexpired CAs, current first
	ca             *keyPair            // current CA with its key, nil if unusable
	caProblem      string
	serving        *keyPair // nil if unusable
	servingProblem string
}

// load parses the Secret, keeping only what is valid at now.
func (p *Provisioner) load(secret *corev1.Secret, now time.Time) *state {
	st := &state{caProblem: "none yet", servingProblem: "none yet"}
	if secret == nil {
		return st
	}
	d := secret.Data
	cas, err := parseCerts(d[CABundleKey])
	if err != nil {
		st.caProblem = "unusable " + CABundleKey + ": " + err.Error()
		p.Log.Info("Replacing an unusable webhook CA bundle", "secret", secret.Name, "error", err.Error())
		cas = nil
	}
	for _, c := range cas {
		if validCA(c, now) == nil && !containsCert(st.bundle, c) {
			st.bundle = append(st.bundle, c)
		}
	}
	if len(cas) > 0 {
		ca, err := parseKeyPair(pemOf(cas[0]), d[CAKeyKey])
		if err == nil {
			err = validCA(ca.cert, now)
		}
		if err != nil {
			// Never inject a CA we cannot prove is ours (its key is not
			// here), whatever else is wrong with it.
			st.bundle = slices.DeleteFunc(st.bundle, cas[0].Equal)
			st.caProblem = "unusable CA: " + err.Error()
			p.Log.Info("Replacing an unusable webhook CA", "secret", secret.Name, "error", err.Error())
		} else {
			st.ca = ca
			st.caProblem = "the CA is due for rotation"
		}
	}
	if len(d[CertKey]) == 0 {
		return st
	}
	serving, err := parseKeyPair(d[CertKey], d[KeyKey])
	if err == nil {
		err = verifyServing(serving.cert, st.bundle, now, p.DNSNames(), p.IPs)
	}
	if err != nil {
		st.servingProblem = "unusable serving certificate: " + err.Error()
		p.Log.Info("Replacing an unusable webhook serving certificate", "secret", secret.Name, "error", err.Error())
		return st
	}
	st.serving = serving
	return st
}

// writeSecret creates the Secret or patches it from the version it was read
// at; any concurrent change makes the write fail and the caller start over.
func (p *Provisioner) writeSecret(ctx context.Context, read *corev1.Secret, st *state) error {
	data := map[string][]byte{
		CABundleKey: pemBundle(st.bundle),
		CAKeyKey:    st.ca.keyPEM,
	}
	if st.serving != nil && signedByAny(st.serving.cert, st.bundle) {
		data[CertKey] = st.serving.certPEM
		data[KeyKey] = st.serving.keyPEM
	}
	name := p.Namespace + "/" + p.SecretName
	if read == nil {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.SecretName,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "kubext-manager"}},
			Type: corev1.SecretTypeOpaque,
			Data: data,
		}
		if err := p.Client.Create(ctx, s); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return errRetry
			}
			return p.explain(err, "create", "Secret", name)
		}
		return nil
	}
	s := read.DeepCopy()
	// Keys this package does not know about are dropped: nothing else may
	// be read from this Secret.
	s.Data = data
	if err := p.Client.Patch(ctx, s, client.MergeFromWithOptions(read, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return errRetry
		}
		return p.explain(err, "patch", "Secret", name)
	}
	return nil
}

// inject merges bundle into every configuration's caBundle (dropping only
// expired or unparsable entries) and returns the CAs that every
// configuration trusts afterwards.
func (p *Provisioner) inject(ctx context.Context, bundle []*x509.Certificate, now time.Time) ([]*x509.Certificate, error) {
	var trusted []*x509.Certificate
	for i, name := range p.WebhookConfigurations {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := p.Client.Get(ctx, client.ObjectKey{Name: name}, vwc); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("%w: ValidatingWebhookConfiguration %s: install config/webhook "+
					"(or run with --enable-webhooks=false)", ErrConfigurationMissing, name)
			}
			return nil, p.explain(err, "get", "ValidatingWebhookConfiguration", name)
		}
		want := slices.Clone(bundle)
		for _, w := range vwc.Webhooks {
			cas, _ := parseCerts(w.ClientConfig.CABundle)
			if cas == nil {
				cas = parseLenient(w.ClientConfig.CABundle)
			}
			for _, c := range cas {
				if validCA(c, now) == nil && !containsCert(want, c) {
					want = append(want, c)
				}
			}
		}
		wantPEM := pemBundle(want)
		patched := vwc.DeepCopy()
		for j := range patched.Webhooks {
			patched.Webhooks[j].ClientConfig.CABundle = wantPEM
		}
		if !equalWebhooks(vwc, patched) {
			if err := p.Client.Patch(ctx, patched, client.MergeFromWithOptions(vwc, client.MergeFromWithOptimisticLock{})); err != nil {
				if apierrors.IsConflict(err) {
					return nil, errRetry
				}
				return nil, p.explain(err, "patch", "ValidatingWebhookConfiguration", name)
			}
			p.Log.Info("Injected the webhook CA bundle", "configuration", name, "cas", len(want))
		}
		if i == 0 {
			trusted = want
		} else {
			trusted = slices.DeleteFunc(trusted, func(c *x509.Certificate) bool { return !containsCert(want, c) })
		}
	}
	p.mu.Lock()
	p.trusted = trusted
	p.mu.Unlock()
	return trusted, nil
}

// parseLenient keeps the certificates of a bundle that also holds garbage
// (which it then drops): someone else's bad edit must not make us forget
// a CA that a served certificate needs.
func parseLenient(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return out
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil && block.Type == "CERTIFICATE" {
			out = append(out, c)
		}
	}
}

func equalWebhooks(a, b *admissionregistrationv1.ValidatingWebhookConfiguration) bool {
	return slices.EqualFunc(a.Webhooks, b.Webhooks, func(x, y admissionregistrationv1.ValidatingWebhook) bool {
		return string(x.ClientConfig.CABundle) == string(y.ClientConfig.CABundle) &&
			ptrEq(x.FailurePolicy, y.FailurePolicy)
	})
}

func ptrEq[T comparable](a, b *T) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func containsCert(cs []*x509.Certificate, c *x509.Certificate) bool {
	return slices.ContainsFunc(cs, func(x *x509.Certificate) bool { return x.Equal(c) })
}

func signedByAny(c *x509.Certificate, cas []*x509.Certificate) bool {
	return slices.ContainsFunc(cas, func(ca *x509.Certificate) bool { return signedBy(c, ca) })
}

// writeFiles puts the pair into the certificate directory when it differs,
// each file replaced by a rename so that certwatcher never reads half a
// file; the key goes first, and certwatcher keeps the old pair if it reads
// a new key with the old certificate, until the certificate follows.
func (p *Provisioner) writeFiles(kp *keyPair) error {
	if err := os.MkdirAll(p.CertDir, 0o700); err != nil {
		return err
	}
	certPath := filepath.Join(p.CertDir, CertKey)
	if old, err := os.ReadFile(certPath); err == nil && string(old) == string(kp.certPEM) {
		if oldKey, err := os.ReadFile(filepath.Join(p.CertDir, KeyKey)); err == nil && string(oldKey) == string(kp.keyPEM) {
			return nil
		}
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{KeyKey, kp.keyPEM}, {CertKey, kp.certPEM}} {
		tmp, err := os.CreateTemp(p.CertDir, "."+f.name+"-*")
		if err != nil {
			return err
		}
		_, werr := tmp.Write(f.data)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr); err != nil {
			_ = os.Remove(tmp.Name())
			return err
		}
		if err := os.Rename(tmp.Name(), filepath.Join(p.CertDir, f.name)); err != nil {
			_ = os.Remove(tmp.Name())
			return err
		}
	}
	p.Log.Info("Wrote the webhook serving certificate", "dir", p.CertDir, "notAfter", kp.cert.NotAfter)
	return nil
}

// CheckServing dials this replica's webhook server and says why the API
// server could not verify the certificate it answers with, or nil.
func (p *Provisioner) CheckServing(ctx context.Context) error {
	p.mu.Lock()
	trusted := p.trusted
	p.mu.Unlock()
	if len(trusted) == 0 {
		return errors.New("the webhook CA bundle is not injected yet")
	}
	roots := x509.NewCertPool()
	for _, c := range trusted {
		roots.AddCert(c)
	}
	d := tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: p.DNSNames()[0], MinVersion: tls.VersionTLS12}}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", p.ServerAddr)
	if err != nil {
		return fmt.Errorf("the webhook server on %s does not answer with a certificate the webhook configurations trust: %w", p.ServerAddr, err)
	}
	return conn.Close()
}

// EnsureFailClosed switches every webhook of the configurations to
// failurePolicy Fail, once this replica's server answers with a
// certificate the configurations' bundle verifies. Before that, the
// failurePolicy Ignore they are installed with lets writes through.
func (p *Provisioner) EnsureFailClosed(ctx context.Context) error {
	if !p.FailClosed {
		return nil
	}
	if err := p.CheckServing(ctx); err != nil {
		return err
	}
	fail := admissionregistrationv1.Fail
	for _, name := range p.WebhookConfigurations {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := p.Client.Get(ctx, client.ObjectKey{Name: name}, vwc); err != nil {
			return p.explain(err, "get", "ValidatingWebhookConfiguration", name)
		}
		patched := vwc.DeepCopy()
		for j := range patched.Webhooks {
			patched.Webhooks[j].FailurePolicy = &fail
		}
		if equalWebhooks(vwc, patched) {
			continue
		}
		if err := p.Client.Patch(ctx, patched, client.MergeFromWithOptions(vwc, client.MergeFromWithOptimisticLock{})); err != nil {
			return p.explain(err, "patch", "ValidatingWebhookConfiguration", name)
		}
		p.Log.Info("Webhooks fail closed now", "configuration", name)
	}
	return nil
}

// explain adds to a Forbidden error the RBAC rule the manager lacks.
func (p *Provisioner) explain(err error, verb, kind, name string) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("the manager may not %s %s %s, which it needs to provision the webhook certificate "+
			"(its role in config/rbac grants this by name; check the role binding, or run with --webhook-cert-source=external): %w",
			verb, kind, name, err)
	}
	return fmt.Errorf("%s %s %s: %w", verb, kind, name, err)
}

// Start keeps the certificate current until ctx ends, as a manager
// runnable on every replica (not only the leader).
func (p *Provisioner) Start(ctx context.Context) error {
	resync := p.Resync
	if resync == 0 {
		resync = time.Minute
	}
	for {
		wait := resync
		if err := p.Ensure(ctx); err != nil {
			p.Log.Error(err, "Keeping the webhook certificate current")
			wait = 5 * time.Second
		} else if err := p.EnsureFailClosed(ctx); err != nil {
			p.Log.Info("Webhooks not switched to fail closed yet", "reason", err.Error())
			wait = 2 * time.Second
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// NeedLeaderElection is false: every replica serves webhooks and needs the
// certificate.
func (p *Provisioner) NeedLeaderElection() bool { return false }
