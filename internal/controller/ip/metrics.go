package ip

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
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
	metrics.Registry.MustRegister(allocations, attachSeconds, failovers, failoverSeconds, ec2Seconds, ec2Failures)
}
