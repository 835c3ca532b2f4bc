package agentkube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// Registry is the agents' metrics registry: the Go runtime's and the
// process's, the API requests the agent made (rest_client_requests_total,
// as controller-runtime exports it for the manager) and what the agent
// registers itself.
var Registry = prometheus.NewRegistry()

var requests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "rest_client_requests_total",
	Help: "Number of HTTP requests, partitioned by status code, method, and host.",
}, []string{"code", "method", "host"})

func init() {
	Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), requests)
	// Set rather than Register, which keeps only the first caller's: where
	// controller-runtime is linked too (tests), its init may come first.
	clientmetrics.RequestResult = requestResult{}
}

type requestResult struct{}

func (requestResult) Increment(_ context.Context, code, method, host string) {
	requests.WithLabelValues(code, method, host).Inc()
}

// Check is a named health or readiness check.
type Check struct {
	Name  string
	Check func() error
}

// ServeProbes answers /healthz (the process runs) and /readyz (every
// check passes) on addr until ctx ends; "" or "0" serves nothing.
func ServeProbes(ctx context.Context, addr string, ready ...Check) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		var failed []string
		for _, c := range ready {
			if err := c.Check(); err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", c.Name, err))
			}
		}
		if len(failed) > 0 {
			http.Error(w, strings.Join(failed, "\n"), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return serve(ctx, addr, mux)
}

// ServeMetrics answers /metrics with Registry on addr until ctx ends; ""
// or "0" serves nothing.
func ServeMetrics(ctx context.Context, addr string) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(Registry, promhttp.HandlerOpts{}))
	return serve(ctx, addr, mux)
}

// ServePprof answers Go's profiling endpoints (/debug/pprof/...) on addr
// until ctx ends; "" or "0" (the agents' default) serves nothing. For a
// person finding where an agent's CPU or memory goes: bind it to the
// loopback address of the node.
func ServePprof(ctx context.Context, addr string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return serve(ctx, addr, mux)
}

func serve(ctx context.Context, addr string, h http.Handler) error {
	if addr == "" || addr == "0" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
