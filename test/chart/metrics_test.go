package chart

// The blank imports are the packages whose metrics the rules and dashboard
// use. They register on controller-runtime's metrics.Registry (the manager's,
// and the ip-agent's) or agentkube.Registry (the reboot-agent's) in init, as
// they do in the binaries; TestMetricPackagesAreLinked checks the binaries
// link them.
import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	_ "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	"github.com/kubext/kubext/internal/agentkube"
	_ "github.com/kubext/kubext/internal/controller/ip"
	_ "github.com/kubext/kubext/internal/controller/ippool"
	_ "github.com/kubext/kubext/internal/controller/reboot"
	_ "github.com/kubext/kubext/internal/witnessrun"
)

// metricPackages are the packages imported above, and the binaries that
// must link each (go list -deps).
var metricPackages = map[string][]string{
	"github.com/kubext/kubext/internal/controller/ip":     {"./cmd/manager"},
	"github.com/kubext/kubext/internal/controller/ippool": {"./cmd/manager"},
	"github.com/kubext/kubext/internal/controller/reboot": {"./cmd/manager"},
	"github.com/kubext/kubext/internal/witnessrun":        {"./cmd/ip-agent"},
	// controller-runtime's own: reconcile, work queue, client and leader
	// election metrics, in the manager.
	"sigs.k8s.io/controller-runtime/pkg/metrics":                     {"./cmd/manager"},
	"sigs.k8s.io/controller-runtime/pkg/internal/controller/metrics": {"./cmd/manager"},
	// The agents' client metrics, without controller-runtime.
	"github.com/kubext/kubext/internal/agentkube": {"./cmd/reboot-agent", "./cmd/ip-agent"},
}

// synthetic metrics Prometheus makes itself for every target.
var synthetic = []string{"up", "scrape_duration_seconds", "scrape_samples_scraped"}

// TestRulesAndDashboardUseExportedMetrics: every metric name in an alert
// expression (config/prometheus/rules.yaml) and in a dashboard query
// (config/prometheus/dashboard.json) is registered by the code the binaries
// run. A renamed metric fails here instead of leaving a silent alert or an
// empty panel.
func TestRulesAndDashboardUseExportedMetrics(t *testing.T) {
	exprs := ruleExprs(t)
	exprs = append(exprs, dashboardExprs(t)...)
	if len(exprs) < 10 {
		t.Fatalf("found only %d expressions in the rules and dashboard", len(exprs))
	}
	used := map[string][]string{}
	for _, e := range exprs {
		for _, name := range metricNames(e) {
			used[name] = append(used[name], e)
		}
	}
	var names []string
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !exported(n) {
			t.Errorf("metric %s is not exported by any kubext binary; used in:\n  %s", n, strings.Join(used[n], "\n  "))
		}
	}
	t.Logf("%d metrics checked: %s", len(names), strings.Join(names, ", "))
}

// TestMetricCheckCanFail: the check above tells an unknown metric (a typo)
// from known ones, including histogram series.
func TestMetricCheckCanFail(t *testing.T) {
	for _, n := range []string{"kubext_ippool_adresses", "kubext_reboot_nodes_halted", "kubext_ip_attach_seconds_bucket"} {
		if exported(n) {
			t.Errorf("%s is taken for exported", n)
		}
	}
	for _, n := range []string{"kubext_ippool_addresses", "kubext_ip_attach_duration_seconds_bucket", "workqueue_depth", "up"} {
		if !exported(n) {
			t.Errorf("%s is taken for not exported", n)
		}
	}
	got := metricNames(`sum by (pool, le) (rate(kubext_a_bucket{job="x",pool=~"a|b"}[5m])) / on(pool) group_left kubext_b > 0.9 unless absent(kubext_c offset 1h)`)
	if want := []string{"kubext_a_bucket", "kubext_b", "kubext_c"}; !slices.Equal(got, want) {
		t.Errorf("metricNames = %v, want %v", got, want)
	}
}

// TestMetricPackagesAreLinked: the packages whose registrations the check
// trusts are linked into the binaries that export them.
func TestMetricPackagesAreLinked(t *testing.T) {
	deps := map[string]string{}
	for pkg, bins := range metricPackages {
		for _, bin := range bins {
			if _, ok := deps[bin]; !ok {
				deps[bin] = string(run(t, "go", "list", "-deps", bin))
			}
			if !slices.Contains(strings.Fields(deps[bin]), pkg) {
				t.Errorf("%s does not link %s: the metrics it registers are not exported by that binary", bin, pkg)
			}
		}
	}
}

// exported tells whether a metric (or a histogram/summary series of one)
// is registered on controller-runtime's registry or the agents':
// registering a probe of the same name with another help text fails
// exactly when it is.
func exported(name string) bool {
	if slices.Contains(synthetic, name) {
		return true
	}
	candidates := []string{name}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			candidates = append(candidates, base)
		}
	}
	for _, n := range candidates {
		for _, reg := range []*prometheus.Registry{metrics.Registry.(*prometheus.Registry), agentkube.Registry} {
			probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: n, Help: "kubext test/chart probe"})
			err := reg.Register(probe)
			if err == nil {
				reg.Unregister(probe)
				continue
			}
			var already prometheus.AlreadyRegisteredError
			if errors.As(err, &already) || strings.Contains(err.Error(), "previously registered descriptor with the same fully-qualified name") {
				return true
			}
		}
	}
	return false
}

var (
	promStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
		"group_left", "group_right", "inf", "nan", "atan2"}
)

// metricNames returns the metric names a PromQL expression selects, sorted:
// what is left once strings, label matchers, ranges, grouping labels,
// functions and keywords are taken out.
func metricNames(expr string) []string {
	s := promStrings.ReplaceAllString(expr, " ")
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRanges.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	var names []string
	for _, loc := range promIdent.FindAllStringIndex(s, -1) {
		word := s[loc[0]:loc[1]]
		rest := strings.TrimLeft(s[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || slices.Contains(promKeywords, strings.ToLower(word)) {
			continue // a function or aggregation, or a keyword
		}
		if loc[0] > 0 && (s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9' || s[loc[0]-1] == '.') {
			continue // the exponent or unit of a number
		}
		names = append(names, word)
	}
	sort.Strings(names)
	return slices.Compact(names)
}

func ruleExprs(t *testing.T) []string {
	t.Helper()
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert, Record, Expr string
				}
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(root(t), "config/prometheus/rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &rule); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	return exprs
}

func dashboardExprs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(t), "config/prometheus/dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	return exprs
}
