package witnessrun

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubext/kubext/internal/agentkube"
	"github.com/kubext/kubext/internal/witnessguard"
)

// Where no node failed, every declaration is a false one (a witness that
// did not hear a live holder in time: a starved agent, a lossy link), and
// each costs the holder a restart of its generation and its addresses a
// moment of silence: worth an alert when it grows.
var (
	declarations = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kubext_witness_declarations_total",
		Help: "Generations of other nodes this node, as a witness, declared silent.",
	})
	generationsLost = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kubext_witness_generations_lost_total",
		Help: "Times a witness told this node its generation was declared silent (the node stopped answering and started a new one).",
	})
)

func init() {
	agentkube.Registry.MustRegister(declarations, generationsLost, guardMetrics{witnessguard.Collector(0)})
}

// guardInstalled is set once New has installed the guard: before, and
// without one (--witness-guard=false, the bench's light agents), its
// counters are not reported.
var guardInstalled atomic.Bool

// guardMetrics reports the guard's drops (witnessguard.Collector) once it
// is installed.
type guardMetrics struct{ prometheus.Collector }

func (g guardMetrics) Collect(ch chan<- prometheus.Metric) {
	if guardInstalled.Load() {
		g.Collector.Collect(ch)
	}
}
