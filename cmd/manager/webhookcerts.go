package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubext/kubext/internal/webhookcert"
)

const (
	serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
	certSourceSelf              = "self"
	certSourceExternal          = "external"
)

// webhookFlags choose where the webhook server's certificate comes from
// and, when the manager provisions it, which objects it keeps.
type webhookFlags struct {
	certSource     string
	namespace      string
	secretName     string
	serviceName    string
	configurations string
	failClosed     bool
}

func (w *webhookFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&w.certSource, "webhook-cert-source", certSourceSelf,
		"Where the webhook serving certificate comes from: 'self' (the manager issues and rotates it, keeps it in "+
			"--webhook-secret-name and injects its CA into --webhook-configurations) or 'external' (cert-manager "+
			"or another tool mounts tls.crt and tls.key in --webhook-cert-dir and injects the CA bundle).")
	fs.StringVar(&w.namespace, "webhook-namespace", "",
		"Namespace of the webhook Service and certificate Secret (default: the pod's namespace).")
	fs.StringVar(&w.secretName, "webhook-secret-name", "kubext-webhook-server-cert",
		"Secret that holds the self-provisioned CA and serving certificate (the manager's role may touch only this name).")
	fs.StringVar(&w.serviceName, "webhook-service-name", "kubext-webhook-service",
		"Service through which the API server calls the webhooks; the certificate is issued for its DNS names.")
	fs.StringVar(&w.configurations, "webhook-configurations", "kubext-validating-webhook-configuration",
		"Comma-separated ValidatingWebhookConfigurations whose CA bundle the manager injects "+
			"(the manager's role may patch only these names).")
	fs.BoolVar(&w.failClosed, "webhook-fail-closed", true,
		"Switch the webhooks to failurePolicy Fail once this replica serves a certificate the API server verifies "+
			"(with --webhook-cert-source=self). They are installed with Ignore, so a fresh install never blocks.")
}

// provisioner issues (or reads and checks) the certificate, injects its CA
// and writes it into certDir before the webhook server starts, and returns
// the provisioner that keeps it current from then on.
func (w *webhookFlags) validate() error {
	if w.certSource != certSourceSelf && w.certSource != certSourceExternal {
		return fmt.Errorf("--webhook-cert-source must be %s or %s, not %q", certSourceSelf, certSourceExternal, w.certSource)
	}
	return nil
}

func (w *webhookFlags) provisioner(ctx context.Context, cfg *rest.Config, certDir string, port int) (*webhookcert.Provisioner, error) {
	ns := w.namespace
	if ns == "" {
		data, err := os.ReadFile(serviceAccountNamespaceFile)
		if err != nil {
			return nil, fmt.Errorf("--webhook-cert-source=self needs the manager's namespace: "+
				"set --webhook-namespace, or run with --enable-webhooks=false out of cluster (%w)", err)
		}
		ns = strings.TrimSpace(string(data))
	}
	// No cache: the role allows get on these objects by name only, not
	// the list and watch an informer needs.
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	// Named in managedFields, and so in the conflict a server-side apply
	// of the manifests reports on failurePolicy (docs/webhooks.md).
	c = client.WithFieldOwner(c, "kubext-webhook-certificate")
	p := &webhookcert.Provisioner{
		Client:                c,
		Namespace:             ns,
		SecretName:            w.secretName,
		ServiceName:           w.serviceName,
		WebhookConfigurations: strings.Split(w.configurations, ","),
		CertDir:               certDir,
		ServerAddr:            net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		FailClosed:            w.failClosed,
		Log:                   ctrl.Log.WithName("webhook-certificate"),
	}
	// Transient errors (an API server restarting) are retried for a while;
	// a missing permission or object is reported at once, since waiting
	// will not fix it.
	deadline := time.Now().Add(time.Minute)
	for {
		err := p.Ensure(ctx)
		if err == nil {
			return p, nil
		}
		if time.Now().After(deadline) || webhookcert.Permanent(err) {
			return nil, fmt.Errorf("provisioning the webhook certificate: %w", err)
		}
		p.Log.Info("Retrying", "error", err.Error())
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
