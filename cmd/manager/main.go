// Command manager runs kubext's cluster-wide controllers in one process.
// --controllers picks which of them run; leader election makes a second
// replica a hot spare.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
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
	var (
		metricsAddr    string
		metricsSecure  bool
		probeAddr      string
		leaderElect    bool
		leaderElectNS  string
		enableHTTP2    bool
		controllerList string
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080",
		"Address the metrics endpoint binds to, e.g. :8443 (use --metrics-secure) or :8080; 0 disables it.")
	flag.BoolVar(&metricsSecure, "metrics-secure", false,
		"Serve metrics over HTTPS, authenticated and authorized through the API server.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	flag.BoolVar(&leaderElect, "leader-elect", false,
		"Elect a leader so that only one replica reconciles; the others wait as hot spares.")
	flag.StringVar(&leaderElectNS, "leader-election-namespace", "",
		"Namespace of the leader-election Lease (default: the pod's namespace, or kube-system out of cluster).")
	flag.BoolVar(&enableHTTP2, "enable-http2", false,
		"Serve metrics over HTTP/2 (off by default against the HTTP/2 Rapid Reset attacks).")
	flag.StringVar(&controllerList, "controllers", "all",
		"Comma-separated controllers to run, or 'all'. Known: "+strings.Join(controllerNames(), ", ")+".")
	opts := zap.Options{Development: true}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	selected, err := selectControllers(controllerList)
	if err != nil {
		log.Error(err, "Invalid --controllers")
		os.Exit(2)
	}

	metricsOpts := metricsserver.Options{BindAddress: metricsAddr, SecureServing: metricsSecure}
	if metricsSecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	if !enableHTTP2 {
		metricsOpts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	if leaderElectNS == "" && leaderElect {
		if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err != nil {
			leaderElectNS = "kube-system"
		}
	}

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        probeAddr,
		LeaderElection:                leaderElect,
		LeaderElectionID:              "manager.kubext.io",
		LeaderElectionNamespace:       leaderElectNS,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		log.Error(err, "Unable to create manager")
		os.Exit(1)
	}
	for _, c := range selected {
		if err := c.setup(mgr); err != nil {
			log.Error(err, "Unable to set up controller", "controller", c.name)
			os.Exit(1)
		}
		log.Info("Set up controller", "controller", c.name)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "Unable to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "Unable to set up ready check")
		os.Exit(1)
	}

	log.Info("Starting manager", "controllers", names(selected), "leaderElection", leaderElect)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Manager exited with an error")
		os.Exit(1)
	}
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
