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

// registerGuardMetrics registers the guard's counters, once per process.
func registerGuardMetrics() error {
	err := agentkube.Registry.Register(witnessguard.Collector(0))
	if errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return nil
	}
	return err
}
