package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/test/testenv"
)

var k8s client.Client

func TestMain(m *testing.M) {
	env, err := testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer func() { _ = env.Stop() }()
		scheme := runtime.NewScheme()
		if err := rebootv1.AddToScheme(scheme); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if k8s, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// group builds a RebootGroup as the user would write it in YAML, so that
// tests can send values the Go types could not hold.
func group(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": rebootv1.GroupVersion.String(),
		"kind":       "RebootGroup",
		"metadata":   map[string]any{"name": name},
	}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

func window(start, end, tz string, days ...any) map[string]any {
	w := map[string]any{"start": start, "end": end}
	if tz != "" {
		w["timeZone"] = tz
	}
	if len(days) > 0 {
		w["days"] = days
	}
	return w
}

func expr(key, op string, values ...any) map[string]any {
	e := map[string]any{"key": key, "operator": op}
	if values != nil {
		e["values"] = values
	}
	return e
}

func TestRebootGroupValidation(t *testing.T) {
	tests := map[string]struct {
		name string
		spec map[string]any
		want string // substring of the error; "" = accepted
	}{
		"empty spec":                  {},
		"number":                      {spec: map[string]any{"maxUnavailable": int64(3)}},
		"percentage":                  {spec: map[string]any{"maxUnavailable": "25%"}},
		"100 percent":                 {spec: map[string]any{"maxUnavailable": "100%"}},
		"1 percent":                   {spec: map[string]any{"maxUnavailable": "1%"}},
		"zero":                        {spec: map[string]any{"maxUnavailable": int64(0)}, want: "spec.maxUnavailable must be at least 1: 0 would never reboot a node"},
		"negative":                    {spec: map[string]any{"maxUnavailable": int64(-2)}, want: "spec.maxUnavailable must not be negative"},
		"zero percent":                {spec: map[string]any{"maxUnavailable": "0%"}, want: "spec.maxUnavailable must be at least 1%"},
		"over 100 percent":            {spec: map[string]any{"maxUnavailable": "101%"}, want: "spec.maxUnavailable must be at most 100%"},
		"way over 100 percent":        {spec: map[string]any{"maxUnavailable": "1000%"}, want: "spec.maxUnavailable must be at most 100%"},
		"malformed":                   {spec: map[string]any{"maxUnavailable": "two"}, want: "spec.maxUnavailable must be a number such as 2 or a percentage such as 25%"},
		"number as string":            {spec: map[string]any{"maxUnavailable": "2"}, want: "spec.maxUnavailable must be a number such as 2 or a percentage such as 25%"},
		"negative percent":            {spec: map[string]any{"maxUnavailable": "-5%"}, want: "spec.maxUnavailable must be a number such as 2 or a percentage such as 25%"},
		"fractional percent":          {spec: map[string]any{"maxUnavailable": "2.5%"}, want: "spec.maxUnavailable must be a number such as 2 or a percentage such as 25%"},
		"selector":                    {spec: map[string]any{"nodeSelector": map[string]any{"matchLabels": map[string]any{"pool": "a"}, "matchExpressions": []any{expr("zone", "In", "a", "b"), expr("gpu", "DoesNotExist")}}}},
		"selector bad operator":       {spec: map[string]any{"nodeSelector": map[string]any{"matchExpressions": []any{expr("zone", "Equals", "a")}}}, want: "operator must be In, NotIn, Exists or DoesNotExist"},
		"selector In no values":       {spec: map[string]any{"nodeSelector": map[string]any{"matchExpressions": []any{expr("zone", "In")}}}, want: "with operator In or NotIn need at least one value"},
		"selector Exists values":      {spec: map[string]any{"nodeSelector": map[string]any{"matchExpressions": []any{expr("zone", "Exists", "a")}}}, want: "with operator Exists or DoesNotExist must not have values"},
		"default group":               {name: "default", spec: map[string]any{"maxUnavailable": int64(2)}},
		"default group selector":      {name: "default", spec: map[string]any{"nodeSelector": map[string]any{}}, want: "the RebootGroup named default holds the nodes no other group selects and must not set spec.nodeSelector"},
		"windows":                     {spec: map[string]any{"windows": []any{window("22:00", "04:00", "Europe/Oslo", "Saturday", "Sunday"), window("00:00", "24:00", "", "Wednesday"), window("01:30", "02:30", "America/Argentina/Buenos_Aires"), window("03:00", "05:00", "Etc/GMT+5")}}},
		"window bad start":            {spec: map[string]any{"windows": []any{window("2:00", "04:00", "")}}, want: "a window's start and end must be times as HH:MM on a 24-hour clock"},
		"window bad end":              {spec: map[string]any{"windows": []any{window("02:00", "24:30", "")}}, want: "a window's start and end must be times as HH:MM on a 24-hour clock"},
		"window hour 25":              {spec: map[string]any{"windows": []any{window("25:00", "04:00", "")}}, want: "a window's start and end must be times as HH:MM on a 24-hour clock"},
		"window start 24:00":          {spec: map[string]any{"windows": []any{window("24:00", "04:00", "")}}, want: "a window's start must be between 00:00 and 23:59"},
		"window empty":                {spec: map[string]any{"windows": []any{window("03:00", "03:00", "")}}, want: "a window's start and end must differ"},
		"window bad day":              {spec: map[string]any{"windows": []any{window("02:00", "04:00", "", "Sun")}}, want: `Unsupported value: "Sun"`},
		"window no end":               {spec: map[string]any{"windows": []any{map[string]any{"start": "02:00"}}}, want: "spec.windows[0].end: Required value"},
		"window zone with spaces":     {spec: map[string]any{"windows": []any{window("02:00", "04:00", "Europe/ Oslo")}}, want: "spec.windows[].timeZone must be an IANA time zone name"},
		"window zone Local":           {spec: map[string]any{"windows": []any{window("02:00", "04:00", "Local")}}, want: "spec.windows[].timeZone must be an IANA time zone name"},
		"window zone traversal":       {spec: map[string]any{"windows": []any{window("02:00", "04:00", "../etc/passwd")}}, want: "spec.windows[].timeZone must be an IANA time zone name"},
		"window unknown zone":         {spec: map[string]any{"windows": []any{window("02:00", "04:00", "Europe/Osloo")}}, want: "unknown time zone Europe/Osloo evaluating rule: spec.windows[].timeZone is not in the time zone database"},
		"drain":                       {spec: map[string]any{"drain": map[string]any{"timeoutSeconds": int64(600), "gracePeriodSeconds": int64(30), "deleteEmptyDirData": false, "blockingPodSelector": map[string]any{"matchLabels": map[string]any{"app": "batch"}}}}},
		"drain zero timeout":          {spec: map[string]any{"drain": map[string]any{"timeoutSeconds": int64(0)}}, want: "spec.drain.timeoutSeconds must be at least 30"},
		"drain 1s timeout":            {spec: map[string]any{"drain": map[string]any{"timeoutSeconds": int64(1)}}, want: "spec.drain.timeoutSeconds must be at least 30"},
		"drain 29s timeout":           {spec: map[string]any{"drain": map[string]any{"timeoutSeconds": int64(29)}}, want: "drained in part, given back and drained again without end"},
		"drain 30s timeout":           {spec: map[string]any{"drain": map[string]any{"timeoutSeconds": int64(30)}}},
		"drain grace as long":         {spec: map[string]any{"drain": map[string]any{"timeoutSeconds": int64(60), "gracePeriodSeconds": int64(60)}}, want: "spec.drain.timeoutSeconds must be longer than spec.drain.gracePeriodSeconds"},
		"drain grace over default":    {spec: map[string]any{"drain": map[string]any{"gracePeriodSeconds": int64(3600)}}, want: "must be longer than spec.drain.gracePeriodSeconds"},
		"controlPlaneSelector":        {spec: map[string]any{"controlPlaneSelector": map[string]any{"matchExpressions": []any{expr("etcd", "Exists")}}}},
		"controlPlaneSelector empty":  {spec: map[string]any{"controlPlaneSelector": map[string]any{}}, want: "spec.controlPlaneSelector must not be empty"},
		"controlPlaneSelector bad op": {spec: map[string]any{"controlPlaneSelector": map[string]any{"matchExpressions": []any{expr("etcd", "Gt", "1")}}}, want: "spec.controlPlaneSelector.matchExpressions[].operator must be In, NotIn, Exists or DoesNotExist"},
		"negative soak":               {spec: map[string]any{"soakSeconds": int64(-1)}, want: "spec.soakSeconds: Invalid value"},
		"negative maxFailures":        {spec: map[string]any{"maxFailures": int64(-1)}, want: "spec.maxFailures must not be negative; 0 means never halt"},
		"zero maxFailures":            {spec: map[string]any{"maxFailures": int64(0)}},
		"short rebootTimeout":         {spec: map[string]any{"rebootTimeoutSeconds": int64(5)}, want: "spec.rebootTimeoutSeconds: Invalid value"},
		"gates":                       {spec: map[string]any{"healthGates": map[string]any{"evictedPodsReady": true, "podDisruptionBudgets": map[string]any{"namespaceSelector": map[string]any{}}, "readyPods": map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"team": "db"}}, "podSelector": map[string]any{"matchExpressions": []any{expr("app", "In", "db")}}}}}},
		"gates one":                   {spec: map[string]any{"healthGates": map[string]any{"evictedPodsReady": true}}},
		"gates none":                  {spec: map[string]any{"healthGates": map[string]any{}}, want: "spec.healthGates must set at least one gate"},
		"gates evicted off only":      {spec: map[string]any{"healthGates": map[string]any{"evictedPodsReady": false}}, want: "spec.healthGates must set at least one gate"},
		"gates pdb no selector":       {spec: map[string]any{"healthGates": map[string]any{"podDisruptionBudgets": map[string]any{}}}, want: "spec.healthGates.podDisruptionBudgets.namespaceSelector: Required value"},
		"gates pdb bad op":            {spec: map[string]any{"healthGates": map[string]any{"podDisruptionBudgets": map[string]any{"namespaceSelector": map[string]any{"matchExpressions": []any{expr("team", "Gt", "1")}}}}}, want: "spec.healthGates.podDisruptionBudgets.namespaceSelector.matchExpressions[].operator must be In, NotIn, Exists or DoesNotExist"},
		"gates pods empty selector":   {spec: map[string]any{"healthGates": map[string]any{"readyPods": map[string]any{"podSelector": map[string]any{}}}}, want: "spec.healthGates.readyPods.podSelector must not be empty"},
		"gates pods no selector":      {spec: map[string]any{"healthGates": map[string]any{"readyPods": map[string]any{}}}, want: "spec.healthGates.readyPods.podSelector: Required value"},
		"gates pods In no values":     {spec: map[string]any{"healthGates": map[string]any{"readyPods": map[string]any{"podSelector": map[string]any{"matchExpressions": []any{expr("app", "In")}}}}}, want: "spec.healthGates.readyPods.podSelector.matchExpressions[] with operator In or NotIn need at least one value"},
	}
	i := 0
	for name, tc := range tests {
		i++
		t.Run(name, func(t *testing.T) {
			objName := tc.name
			if objName == "" {
				objName = fmt.Sprintf("g%d", i)
			}
			ctx := context.Background()
			u := group(objName, tc.spec)
			err := k8s.Create(ctx, u)
			if err == nil {
				t.Cleanup(func() { _ = k8s.Delete(ctx, u) })
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Create() = %v, want it accepted", err)
			case tc.want != "" && err == nil:
				t.Fatalf("Create() accepted the group, want an error containing %q", tc.want)
			case tc.want != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Create() = %v, want an Invalid error containing %q", err, tc.want)
			}
		})
	}
}

func TestRebootGroupDefaults(t *testing.T) {
	ctx := context.Background()
	g := &rebootv1.RebootGroup{}
	g.Name = "defaults"
	g.Spec.Windows = []rebootv1.MaintenanceWindow{{Start: "01:00", End: "05:00"}}
	if err := k8s.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, g) })
	s := g.Spec
	if s.MaxUnavailable == nil || s.MaxUnavailable.IntValue() != rebootv1.DefaultMaxUnavailable {
		t.Errorf("maxUnavailable = %v, want %d", s.MaxUnavailable, rebootv1.DefaultMaxUnavailable)
	}
	if s.SoakSeconds == nil || *s.SoakSeconds != 60 || s.RebootTimeoutSeconds != 900 || s.MaxFailures == nil || *s.MaxFailures != 1 {
		t.Errorf("soakSeconds, rebootTimeoutSeconds, maxFailures = %v, %d, %v; want 60, 900, 1", s.SoakSeconds, s.RebootTimeoutSeconds, s.MaxFailures)
	}
	if s.Drain.TimeoutSeconds != 1800 || s.Drain.DeleteEmptyDirData == nil || !*s.Drain.DeleteEmptyDirData {
		t.Errorf("drain = %+v, want timeoutSeconds 1800 and deleteEmptyDirData true", s.Drain)
	}
	if s.Windows[0].TimeZone != "UTC" {
		t.Errorf("windows[0].timeZone = %q, want UTC", s.Windows[0].TimeZone)
	}
}
