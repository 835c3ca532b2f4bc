// Command manager runs kubext's cluster-wide controllers in one process.
// --controllers picks which of them run; leader election makes a second
// replica a hot spare.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/kubext/kubext/internal/cachetrim"
	"github.com/kubext/kubext/internal/version"
	ipwebhook "github.com/kubext/kubext/internal/webhook/ip"
	"github.com/kubext/kubext/internal/webhookcert"
)

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	for _, c := range controllers {
		if c.addToScheme != nil {
			utilruntime.Must(c.addToScheme(scheme))
		}
	}
}

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		ctrl.Log.WithName("setup").Error(err, "Manager failed")
		os.Exit(1)
	}
}

// run parses the flags, wires the selected controllers into a manager and
// runs it until ctx ends.
func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	config.RegisterFlags(fs)
	var (
		metricsAddr    string
		metricsSecure  bool
		probeAddr      string
		pprofAddr      string
		leaderElect    bool
		leaderElectNS  string
		enableHTTP2    bool
		controllerList string
		leaseDuration  time.Duration
		renewDeadline  time.Duration
		retryPeriod    time.Duration
		enableWebhooks bool
		webhookPort    int
		webhookCertDir string
		apiQPS         float64
		apiBurst       int
	)
	fs.StringVar(&metricsAddr, "metrics-bind-address", ":8080",
		"Address the metrics endpoint binds to, e.g. :8443 (with --metrics-secure) or :8080; 0 disables it.")
	fs.BoolVar(&metricsSecure, "metrics-secure", false,
		"Serve metrics over HTTPS, authenticated and authorized through the API server.")
	fs.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	fs.StringVar(&pprofAddr, "pprof-bind-address", "", "Address Go's /debug/pprof profiles are served on, e.g. 127.0.0.1:6060 (default off; for profiling, never exposed by the chart).")
	fs.BoolVar(&leaderElect, "leader-elect", false,
		"Elect a leader so that only one replica reconciles; the others wait as hot spares.")
	fs.StringVar(&leaderElectNS, "leader-election-namespace", "",
		"Namespace of the leader-election Lease (default: the pod's namespace, or kube-system out of cluster).")
	fs.DurationVar(&leaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"How long a hot spare waits before taking over from a leader that stopped renewing (crashed without releasing).")
	fs.DurationVar(&renewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"How long the leader keeps trying to renew before it gives up leadership.")
	fs.DurationVar(&retryPeriod, "leader-elect-retry-period", 2*time.Second, "How often leader election is retried.")
	fs.BoolVar(&enableHTTP2, "enable-http2", false,
		"Serve metrics over HTTP/2 (off by default against the HTTP/2 Rapid Reset attacks).")
	fs.StringVar(&controllerList, "controllers", "all",
		"Comma-separated controllers to run, or 'all'. Known: "+strings.Join(controllerNames(), ", ")+".")
	inCluster := os.Getenv("KUBERNETES_SERVICE_HOST") != "" && fileExists(serviceAccountNamespaceFile)
	fs.BoolVar(&enableWebhooks, "enable-webhooks", inCluster,
		"Serve the validating webhooks that refuse overlapping IPPools and IPs whose address no pool hands out "+
			"(config/webhook). On by default in a cluster, off out of cluster (`make run`), where the API server "+
			"could not reach them; without them the controllers report the same problems as conditions.")
	fs.IntVar(&webhookPort, "webhook-port", 9443, "Port the webhook server listens on (with --enable-webhooks).")
	fs.StringVar(&webhookCertDir, "webhook-cert-dir", filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs"),
		"Directory holding the webhook server's certificate and key, tls.crt and tls.key (with --enable-webhooks).")
	fs.Float64Var(&apiQPS, "kube-api-qps", 100,
		"Requests per second the manager's client may make to the API server (client-go's default of 20 takes minutes to place thousands of IPs).")
	fs.IntVar(&apiBurst, "kube-api-burst", 200, "Burst of the manager's client above --kube-api-qps.")
	var hook webhookFlags
	hook.bind(fs)
	var ctrlOpts options
	ctrlOpts.bindFlags(fs)
	opts := zap.Options{Development: true}
	opts.BindFlags(fs)
	if printed, err := version.Parse(fs, args, os.Stdout); err != nil || printed {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	if err := hook.validate(); err != nil {
		return err
	}
	selected, err := selectControllers(controllerList)
	if err != nil {
		return err
	}
	metricsOpts := metricsserver.Options{BindAddress: metricsAddr, SecureServing: metricsSecure}
	if metricsSecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	var tlsOpts []func(*tls.Config)
	if !enableHTTP2 {
		tlsOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	metricsOpts.TLSOpts = tlsOpts
	if enableWebhooks && hook.certSource == certSourceExternal {
		// Fail here, with the way out, rather than in the webhook server.
		if _, err := os.Stat(filepath.Join(webhookCertDir, "tls.crt")); err != nil {
			return fmt.Errorf("--enable-webhooks with --webhook-cert-source=external needs a serving certificate "+
				"(tls.crt, tls.key) in --webhook-cert-dir %s; mount one, use --webhook-cert-source=self, "+
				"or run with --enable-webhooks=false", webhookCertDir)
		}
	}
	if leaderElectNS == "" && leaderElect {
		if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err != nil {
			leaderElectNS = "kube-system"
		}
	}
	cfg, err := config.GetConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(apiQPS), apiBurst
	if err := version.RegisterBuildInfo(metrics.Registry); err != nil {
		return err
	}
	var certs *webhookcert.Provisioner
	if enableWebhooks && hook.certSource == certSourceSelf {
		// The webhook server reads its certificate when it starts: have
		// one in --webhook-cert-dir before the manager starts it.
		if certs, err = hook.provisioner(ctx, cfg, webhookCertDir, webhookPort); err != nil {
			return err
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        probeAddr,
		PprofBindAddress:              pprofAddr,
		LeaderElection:                leaderElect,
		LeaderElectionID:              "manager.kubext.io",
		LeaderElectionNamespace:       leaderElectNS,
		LeaderElectionReleaseOnCancel: true,
		LeaderElectionConfig:          leaderElectionConfig(cfg),
		LeaseDuration:                 &leaseDuration,
		RenewDeadline:                 &renewDeadline,
		RetryPeriod:                   &retryPeriod,
		WebhookServer:                 webhook.NewServer(webhook.Options{Port: webhookPort, CertDir: webhookCertDir, TLSOpts: tlsOpts}),
		// Only the node agents' heartbeats of all Leases, and of Pods and
		// Nodes only what the controllers read.
		Cache: cachetrim.Options(ctrlOpts.heartbeatNamespace),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	for _, c := range selected {
		if err := c.setup(ctx, mgr, &ctrlOpts); err != nil {
			return fmt.Errorf("setting up controller %s: %w", c.name, err)
		}
		log.Info("Set up controller", "controller", c.name)
	}
	if enableWebhooks {
		// Served by every replica, not only the leader: the API server calls
		// whichever one the Service picks.
		if err := ipwebhook.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the webhooks: %w", err)
		}
		if err := mgr.AddReadyzCheck("webhooks", mgr.GetWebhookServer().StartedChecker()); err != nil {
			return err
		}
		if certs != nil {
			if err := mgr.Add(certs); err != nil {
				return err
			}
			// Not ready (so not behind the Service) until the API server
			// could verify what this replica serves.
			if err := mgr.AddReadyzCheck("webhook-certificate", func(req *http.Request) error {
				return certs.CheckServing(req.Context())
			}); err != nil {
				return err
			}
		}
		log.Info("Serving webhooks", "port", webhookPort)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	// Ready once the caches have synced: a replica that cannot see the
	// cluster yet must not receive traffic (webhooks) or count as up.
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return errors.New("caches not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	log.Info("Starting manager", "controllers", names(selected), "leaderElection", leaderElect)
	return mgr.Start(ctx)
}

// selectControllers resolves the --controllers flag against the known list.
func selectControllers(list string) ([]controller, error) {
	if list == "" || list == "all" {
		return controllers, nil
	}
	var out []controller
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, c := range controllers {
			if c.name == name {
				out = append(out, c)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown controller %q (known: %s)", name, strings.Join(controllerNames(), ", "))
		}
	}
	return out, nil
}

func controllerNames() []string { return names(controllers) }

func names(cs []controller) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.name)
	}
	return out
}
