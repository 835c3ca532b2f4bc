package witnessrun

import (
	"errors"

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

func init() { agentkube.Registry.MustRegister(declarations, generationsLost) }

// guardDropped reports the guard's drops, read from the kernel at each
// scrape: a flood on the witness port shows here before it shows as
// declarations.
var guardDropped = prometheus.NewDesc("kubext_witness_guard_dropped_total",
	"Datagrams to the witness port the kernel dropped: from outside --witness-allow-from (reason outside), or beyond a source's rate (reason rate).",
	[]string{"reason"}, nil)

type guardCollector struct{}

func (guardCollector) Describe(ch chan<- *prometheus.Desc) { ch <- guardDropped }

func (guardCollector) Collect(ch chan<- prometheus.Metric) {
	outside, rate, err := witnessguard.Dropped(0)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(guardDropped, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(guardDropped, prometheus.CounterValue, float64(outside), "outside")
	ch <- prometheus.MustNewConstMetric(guardDropped, prometheus.CounterValue, float64(rate), "rate")
}

// registerGuardMetrics registers the guard's counters, once per process.
func registerGuardMetrics() error {
	err := agentkube.Registry.Register(guardCollector{})
	if errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return nil
	}
	return err
}
