package version

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfoMetric is the name of the gauge that tells which build a scraped
// process is, so that dashboards and alerts can tell a half-finished rollout
// (manager and agents on different versions) from a finished one.
const BuildInfoMetric = "kubext_build_info"

// NewBuildInfoCollector returns a constant gauge, always 1, labelled with
// this binary's version, revision and Go version. Register it once per
// process, on the registry its metrics endpoint serves (controller-runtime's
// metrics.Registry for the manager and the agents).
func NewBuildInfoCollector() prometheus.Collector {
	info := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: BuildInfoMetric,
		Help: "Build information of this kubext binary; always 1.",
		ConstLabels: prometheus.Labels{
			"version":   info.Version,
			"revision":  info.Revision,
			"goversion": info.GoVersion,
		},
	})
	g.Set(1)
	return g
}

// RegisterBuildInfo registers the build info gauge on reg. Registering it
// again (a second run in the same process, as tests do) is not an error:
// the series is the same.
func RegisterBuildInfo(reg prometheus.Registerer) error {
	err := reg.Register(NewBuildInfoCollector())
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		return nil
	}
	return err
}
