package webhookcert

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// servingNotAfter is when the certificate this replica serves expires, for
// an alert well before rotation would have to have failed for a month.
var servingNotAfter = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "kubext_webhook_serving_certificate_expiry_timestamp_seconds",
	Help: "When the webhook serving certificate this replica serves expires (Unix time); 0 before it serves one.",
})

func init() { metrics.Registry.MustRegister(servingNotAfter) }
