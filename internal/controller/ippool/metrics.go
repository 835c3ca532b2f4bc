package ippool

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var poolAddresses = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "kubext_ippool_addresses",
	Help: "Addresses of an IPPool: state=size (assignable) or allocated.",
}, []string{"pool", "state"})

func init() { metrics.Registry.MustRegister(poolAddresses) }
