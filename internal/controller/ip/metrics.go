package ip

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

var (
	allocations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubext_ip_allocations_total",
		Help: "Addresses reserved for IPs, by pool.",
	}, []string{"pool"})
	attachSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kubext_ip_attach_duration_seconds",
		Help:    "Time from an IP being placed on a node to that node's agent confirming it answers for it.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2, 5, 10, 30},
	})
	failovers = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kubext_ip_failovers_total",
		Help: "IPs taken from a node whose agent stopped renewing its heartbeat.",
	})
	failoverSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kubext_ip_failover_duration_seconds",
		Help:    "Time from a lost node's last observed heartbeat to the new node confirming it answers for the IP.",
		Buckets: []float64{.5, 1, 2, 3, 4, 5, 7.5, 10, 15, 30, 60},
	})
	ec2Seconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kubext_ip_ec2_attach_duration_seconds",
		Help:    "Time to move an IP of an aws pool to its holder's network interface in EC2 and verify it there, EC2 calls included.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2, 3, 5, 10, 30},
	})
	ec2Failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubext_ip_ec2_failures_total",
		Help: "EC2 steps (resolve, attach, detach, release) that failed, by reason (IAMPermissionMissing, SecondaryIPLimit, Throttled, ...).",
	}, []string{"reason"})
)

func init() {
	metrics.Registry.MustRegister(allocations, attachSeconds, failovers, failoverSeconds, ec2Seconds, ec2Failures, ipReady)
}

// readyDesc is kubext_ip_ready: one series per IP, 1 while its Ready
// condition is True, 0 otherwise, with the condition's reason. It is
// computed from the manager's cache at each scrape, so a deleted IP's
// series goes with it and every replica (the cache runs on all of them)
// reports the same: alert on max by (ip).
var readyDesc = prometheus.NewDesc("kubext_ip_ready",
	"1 while the IP's Ready condition is True, else 0; reason is the condition's reason (Unknown before the controller's first look).",
	[]string{"ip", "reason"}, nil)

// readyCollector exports kubext_ip_ready from the IPs a reader (the
// manager's cache) holds.
type readyCollector struct {
	mu     sync.Mutex
	reader client.Reader
}

// ipReady is registered once; SetupWithManager gives it the cache.
var ipReady = &readyCollector{}

func (c *readyCollector) use(r client.Reader) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reader = r
}

// Describe implements prometheus.Collector.
func (c *readyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- readyDesc }

// Collect implements prometheus.Collector. A cache that cannot answer
// (not synced yet) exports nothing rather than a wrong 0.
func (c *readyCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	r := c.reader
	c.mu.Unlock()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips := &ipv1.IPList{}
	if err := r.List(ctx, ips); err != nil {
		return
	}
	for i := range ips.Items {
		value, reason := 0.0, "Unknown"
		if ready := meta.FindStatusCondition(ips.Items[i].Status.Conditions, ipv1.ConditionReady); ready != nil {
			reason = ready.Reason
			if ready.Status == metav1.ConditionTrue {
				value = 1
			}
		}
		ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, value, ips.Items[i].Name, reason)
	}
}
