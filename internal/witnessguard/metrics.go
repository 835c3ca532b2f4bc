package witnessguard

import "github.com/prometheus/client_golang/prometheus"

// dropped is the guard's drops, read from the kernel at each scrape: a
// flood on the witness port shows here before it shows as declarations.
var dropped = prometheus.NewDesc("kubext_witness_guard_dropped_total",
	"Datagrams to the witness port the kernel dropped: from outside --witness-allow-from (reason outside), or beyond a source's rate (reason rate).",
	[]string{"reason"}, nil)

// Collector exports the drops of the guard in the network namespace
// netnsFd (0: this process's).
func Collector(netnsFd int) prometheus.Collector { return collector{netnsFd} }

type collector struct{ netnsFd int }

func (collector) Describe(ch chan<- *prometheus.Desc) { ch <- dropped }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	outside, rate, err := Dropped(c.netnsFd)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(dropped, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(dropped, prometheus.CounterValue, float64(outside), "outside")
	ch <- prometheus.MustNewConstMetric(dropped, prometheus.CounterValue, float64(rate), "rate")
}
