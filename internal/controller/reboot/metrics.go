package reboot

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	nodesNeeding = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubext_reboot_nodes_needing",
		Help: "Nodes that asked for a reboot and have not been approved yet, by group.",
	}, []string{"group"})
	nodesInProgress = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubext_reboot_nodes_in_progress",
		Help: "Nodes approved for a reboot whose reboot is not verified yet, by group.",
	}, []string{"group"})
	nodesUnavailable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubext_reboot_nodes_unavailable",
		Help: "Nodes counting against the group's maxUnavailable (not Ready, cordoned or rebooting), by group.",
	}, []string{"group"})
	nodesWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubext_reboot_nodes_waiting",
		Help: "Nodes that need a reboot and were not approved, by group and reason (MaxUnavailable, OutsideWindow, Paused, ...).",
	}, []string{"group", "reason"})
	rebootSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kubext_reboot_duration_seconds",
		Help:    "Time from a node's approval to its verified reboot (drain, reboot and soak).",
		Buckets: []float64{5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600},
	})
	drainSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kubext_reboot_drain_duration_seconds",
		Help:    "Time a successful drain took.",
		Buckets: []float64{.1, .5, 1, 5, 10, 30, 60, 120, 300, 600, 1800},
	})
	decisionSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kubext_reboot_decision_latency_seconds",
		Help:    "Time from a slot becoming free (a node's soak ending, a drain timing out, a request withdrawn) to the next node of the group being approved, across reconciles; a slot nothing can take at once (no node waiting, paused, gate held, outside the window) is not counted.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2, 5},
	})
	// phaseSeconds splits a reconcile's time: what a slow rollout of a
	// large cluster spends its controller's single worker on.
	phaseSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kubext_reboot_reconcile_phase_seconds",
		Help:    "Time a reboot reconcile spent in each phase: read (nodes from the cache, groups and ledger from the API server), repair (the ledger against the nodes), advance (the steps of nodes holding a slot, and their writes), gates, grant (deciding and the ledger write), approve (the approvals' node writes), note (needed-since bookkeeping), report (Events and group status).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"phase"})
	refusedWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubext_reboot_refused_writes_total",
		Help: "Writes of the reboot controller the API server refused because the object changed since it was read (a node, the approvals ledger, a group's status), by object; each is decided again from a new read.",
	}, []string{"object"})
	drainTimeouts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubext_reboot_drain_timeouts_total",
		Help: "Drains that did not finish within drain.timeoutSeconds, by group.",
	}, []string{"group"})
	verified = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubext_reboot_verified_total",
		Help: "Reboots verified (new boot ID, Ready through the soak), by group.",
	}, []string{"group"})
)

func init() {
	metrics.Registry.MustRegister(nodesNeeding, nodesInProgress, nodesUnavailable, nodesWaiting,
		rebootSeconds, drainSeconds, decisionSeconds, phaseSeconds, refusedWrites, drainTimeouts, verified)
}

// phaseClock observes each phase of a reconcile as it ends.
type phaseClock struct{ last time.Time }

func startPhases() *phaseClock { return &phaseClock{last: time.Now()} }

// done observes the time since the previous phase ended.
func (p *phaseClock) done(phase string) {
	now := time.Now()
	phaseSeconds.WithLabelValues(phase).Observe(now.Sub(p.last).Seconds())
	p.last = now
}
