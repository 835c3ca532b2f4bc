package stats

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// APIServerLoad is what an API server has served so far, by request kind
// ("VERB resource[/subresource]", every client): how many requests, and
// the seconds spent on them (apiserver_request_duration_seconds_sum; a
// watch counts the time it stayed open, so it is left out of Seconds),
// and the watch events it sent, by resource.
type APIServerLoad struct {
	Requests, Seconds map[string]float64
	WatchEvents       map[string]float64
}

// ReadAPIServerLoad reads the API server's /metrics through rc (an
// administrator's client).
func ReadAPIServerLoad(ctx context.Context, rc rest.Interface) (APIServerLoad, error) {
	raw, err := rc.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return APIServerLoad{}, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	return parseAPIServerLoad(raw)
}

func parseAPIServerLoad(raw []byte) (APIServerLoad, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return APIServerLoad{}, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	load := APIServerLoad{Requests: map[string]float64{}, Seconds: map[string]float64{}, WatchEvents: map[string]float64{}}
	for _, m := range fams["apiserver_request_total"].GetMetric() {
		load.Requests[requestKind(m)] += m.GetCounter().GetValue()
	}
	for _, m := range fams["apiserver_request_duration_seconds"].GetMetric() {
		if k := requestKind(m); !strings.HasPrefix(k, "WATCH") {
			load.Seconds[k] += m.GetHistogram().GetSampleSum()
		}
	}
	for _, m := range fams["apiserver_watch_events_total"].GetMetric() {
		load.WatchEvents[labelOf(m, "resource")] += m.GetCounter().GetValue()
	}
	return load, nil
}

func requestKind(m *dto.Metric) string {
	k := labelOf(m, "verb") + " " + labelOf(m, "resource")
	if sub := labelOf(m, "subresource"); sub != "" {
		k += "/" + sub
	}
	return k
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Since is what the API server served between then and l.
func (l APIServerLoad) Since(then APIServerLoad) APIServerLoad {
	diff := func(now, before map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for k, v := range now {
			if d := v - before[k]; d > 0 {
				out[k] = d
			}
		}
		return out
	}
	return APIServerLoad{Requests: diff(l.Requests, then.Requests), Seconds: diff(l.Seconds, then.Seconds),
		WatchEvents: diff(l.WatchEvents, then.WatchEvents)}
}

// Top is the n request kinds the API server spent the most time on, with
// their counts, as lines "kind: count requests, seconds s", and the watch
// events it sent, most first.
func (l APIServerLoad) Top(n int) []string {
	kinds := make([]string, 0, len(l.Requests))
	for k := range l.Requests {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool {
		if l.Seconds[kinds[i]] != l.Seconds[kinds[j]] {
			return l.Seconds[kinds[i]] > l.Seconds[kinds[j]]
		}
		return l.Requests[kinds[i]] > l.Requests[kinds[j]]
	})
	var out []string
	for _, k := range kinds[:min(n, len(kinds))] {
		out = append(out, fmt.Sprintf("%s: %.0f requests, %.1f s", k, l.Requests[k], l.Seconds[k]))
	}
	res := make([]string, 0, len(l.WatchEvents))
	for r := range l.WatchEvents {
		res = append(res, r)
	}
	sort.Slice(res, func(i, j int) bool { return l.WatchEvents[res[i]] > l.WatchEvents[res[j]] })
	var events []string
	for _, r := range res[:min(n, len(res))] {
		events = append(events, fmt.Sprintf("%s %.0f", r, l.WatchEvents[r]))
	}
	if len(events) > 0 {
		out = append(out, "watch events sent: "+strings.Join(events, ", "))
	}
	return out
}

// ClientRequests is a client's rest_client_requests_total (client-go's
// count of the requests it made, as controller-runtime and agentkube
// export it) by method, from a scrape or a Gather of its registry, as
// "METHOD n" sorted by method.
func ClientRequests(fams []*dto.MetricFamily) string {
	by := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "rest_client_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			by[labelOf(m, "method")] += m.GetCounter().GetValue()
		}
	}
	methods := make([]string, 0, len(by))
	for m := range by {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	parts := make([]string, 0, len(methods))
	for _, m := range methods {
		parts = append(parts, fmt.Sprintf("%s %.0f", m, by[m]))
	}
	return strings.Join(parts, ", ")
}
