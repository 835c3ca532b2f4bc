package stats

import (
	"slices"
	"testing"
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
