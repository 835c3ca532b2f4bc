package stats

import (
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const sample = `# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",group="",resource="nodes",scope="resource",subresource="",verb="PATCH",version="v1"} 10
apiserver_request_total{code="409",component="apiserver",group="",resource="nodes",scope="resource",subresource="",verb="PATCH",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",group="",resource="nodes",scope="cluster",subresource="",verb="WATCH",version="v1"} 5
apiserver_request_total{code="201",component="apiserver",group="events.k8s.io",resource="events",scope="namespace",subresource="",verb="POST",version="v1"} 3
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="PATCH",version="v1",le="+Inf"} 12
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="PATCH",version="v1"} 0.6
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="PATCH",version="v1"} 12
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="nodes",scope="cluster",subresource="",verb="WATCH",version="v1",le="+Inf"} 5
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="nodes",scope="cluster",subresource="",verb="WATCH",version="v1"} 900
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="nodes",scope="cluster",subresource="",verb="WATCH",version="v1"} 5
# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{group="",resource="nodes",version="v1"} 400
`

// The request mix is read by kind across response codes, watches' open
// time is left out, and Since and Top report the window's work, busiest
// first.
func TestAPIServerLoad(t *testing.T) {
	before, err := parseAPIServerLoad([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got := before.Requests["PATCH nodes"]; got != 12 {
		t.Errorf("PATCH nodes = %v, want 12 (both codes)", got)
	}
	if _, ok := before.Seconds["WATCH nodes"]; ok {
		t.Error("a watch's open time counted as work")
	}
	after := APIServerLoad{
		Requests:    map[string]float64{"PATCH nodes": 20, "WATCH nodes": 5, "POST events": 13},
		Seconds:     map[string]float64{"PATCH nodes": 1.6, "POST events": 0.1},
		WatchEvents: map[string]float64{"nodes": 1000},
	}
	d := after.Since(before)
	if d.Requests["PATCH nodes"] != 8 || d.Requests["POST events"] != 10 || d.Requests["WATCH nodes"] != 0 {
		t.Errorf("Since: %v", d.Requests)
	}
	top := d.Top(1)
	want := []string{"PATCH nodes: 8 requests, 1.0 s", "watch events sent: nodes 600"}
	if !slices.Equal(top, want) {
		t.Errorf("Top(1) = %q, want %q", top, want)
	}
}

// A client's requests are summed over codes and hosts, by method.
func TestClientRequests(t *testing.T) {
	fams, err := parseFamilies(`# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="a",method="PATCH"} 3
rest_client_requests_total{code="409",host="a",method="PATCH"} 1
rest_client_requests_total{code="200",host="b",method="GET"} 2
# TYPE other_total counter
other_total 9
`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ClientRequests(fams), "GET 2, PATCH 4"; got != want {
		t.Errorf("ClientRequests = %q, want %q", got, want)
	}
}

func parseFamilies(text string) ([]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	m, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	out := make([]*dto.MetricFamily, 0, len(m))
	for _, f := range m {
		out = append(out, f)
	}
	return out, nil
}
