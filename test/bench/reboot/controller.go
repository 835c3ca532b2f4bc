package main

import (
	"context"
	"fmt"

	dto "github.com/prometheus/client_model/go"

	"github.com/kubext/kubext/test/bench/stats"
)

// printControllerView prints what the manager itself measured: its
// decision latency (kubext_reboot_decision_latency_seconds: a slot freed,
// as the controller saw it, to the next approval), and its reconciles.
// The outside watch's figures add the watches' delays and the controller's
// wait for its own view of the node back Ready.
func printControllerView(ctx context.Context, metricsURL string) error {
	fams, err := stats.Scrape(ctx, metricsURL)
	if err != nil {
		return err
	}
	histogram := func(name string, match map[string]string) *dto.Histogram {
		for _, m := range fams[name].GetMetric() {
			ok := true
			for _, l := range m.GetLabel() {
				if want, set := match[l.GetName()]; set && want != l.GetValue() {
					ok = false
				}
			}
			if ok {
				return m.GetHistogram()
			}
		}
		return nil
	}
	share := func(h *dto.Histogram, le float64) float64 {
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == le && h.GetSampleCount() > 0 {
				return 100 * float64(b.GetCumulativeCount()) / float64(h.GetSampleCount())
			}
		}
		return 0
	}
	mean := func(h *dto.Histogram) float64 {
		if h.GetSampleCount() == 0 {
			return 0
		}
		return h.GetSampleSum() / float64(h.GetSampleCount())
	}
	d := histogram("kubext_reboot_decision_latency_seconds", nil)
	r := histogram("controller_runtime_reconcile_time_seconds", map[string]string{"controller": "reboot"})
	if d == nil || r == nil {
		return fmt.Errorf("the manager's metrics have no reboot decision or reconcile histograms")
	}
	fmt.Printf("the controller's own view: decision latency mean %.3f s over %d, within 0.1 s %.0f%%, 0.5 s %.0f%%, 1 s %.0f%%; reconciles %d, mean %.3f s, within 0.1 s %.0f%%, 1 s %.0f%%\n",
		mean(d), d.GetSampleCount(), share(d, 0.1), share(d, 0.5), share(d, 1),
		r.GetSampleCount(), mean(r), share(r, 0.1), share(r, 1))
	// Where a reconcile's time goes (kubext_reboot_reconcile_phase_seconds),
	// in the reconcile's order.
	fmt.Print("reconcile phases, mean ms:")
	for _, phase := range []string{"read", "repair", "advance", "gates", "grant", "approve", "note", "report"} {
		if h := histogram("kubext_reboot_reconcile_phase_seconds", map[string]string{"phase": phase}); h != nil {
			fmt.Printf(" %s %.1f", phase, 1000*mean(h))
		}
	}
	fmt.Println()
	// Writes refused as made over an old version, by object
	// (kubext_reboot_refused_writes_total).
	fmt.Print("refused writes:")
	for _, m := range fams["kubext_reboot_refused_writes_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "object" {
				fmt.Printf(" %s %.0f", l.GetValue(), m.GetCounter().GetValue())
			}
		}
	}
	fmt.Println()
	return nil
}

// printClientRequests prints the requests the manager made since its
// start: which of the API server's requests are the controller's (the
// rest are the agents', kwok's, the simulated reboots' and this bench's
// watch; the light agents share this process's client metrics with the
// bench's own client, so they are not told apart here).
func printClientRequests(ctx context.Context, metricsURL string) {
	fams, err := stats.Scrape(ctx, metricsURL)
	if err != nil {
		fmt.Printf("requests by the manager: %v\n", err)
		return
	}
	list := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		list = append(list, f)
	}
	fmt.Printf("requests by the manager (since its start): %s\n", stats.ClientRequests(list))
}
