package version

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestGetPrefersStampedValues(t *testing.T) {
	oldV, oldR := Version, Revision
	t.Cleanup(func() { Version, Revision = oldV, oldR })
	Version, Revision = "v9.8.7", "abc123"
	got := Get()
	if got.Version != "v9.8.7" || got.Revision != "abc123" {
		t.Fatalf("Get() = %+v, want the stamped version and revision", got)
	}
	if got.GoVersion != runtime.Version() || got.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("Get() = %+v, want this toolchain and platform", got)
	}
	if s := got.String(); !strings.HasPrefix(s, "v9.8.7 (revision abc123, ") {
		t.Fatalf("String() = %q", s)
	}
}

func TestGetNeverEmpty(t *testing.T) {
	oldV, oldR := Version, Revision
	t.Cleanup(func() { Version, Revision = oldV, oldR })
	Version, Revision = "", ""
	got := Get()
	// A test binary has no stamped values and no VCS stamp: the fallbacks
	// must still say something rather than print an empty version.
	if got.Version == "" || got.Revision == "" {
		t.Fatalf("Get() = %+v, want non-empty fallbacks", got)
	}
}

func TestBuildInfoCollector(t *testing.T) {
	oldV, oldR := Version, Revision
	t.Cleanup(func() { Version, Revision = oldV, oldR })
	Version, Revision = "v1.2.3", "deadbeef"
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewBuildInfoCollector()); err != nil {
		t.Fatal(err)
	}
	want := `# HELP kubext_build_info Build information of this kubext binary; always 1.
# TYPE kubext_build_info gauge
kubext_build_info{goversion="` + runtime.Version() + `",revision="deadbeef",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), BuildInfoMetric); err != nil {
		t.Fatal(err)
	}
	// A second registration on the same registry is a programming error the
	// registry must refuse rather than export two series.
	if err := reg.Register(NewBuildInfoCollector()); err == nil {
		t.Fatal("registering the build info twice succeeded")
	}
}

func TestRegisterBuildInfoTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	for i := 0; i < 2; i++ {
		if err := RegisterBuildInfo(reg); err != nil {
			t.Fatalf("registration %d: %v", i+1, err)
		}
	}
	if n, err := testutil.GatherAndCount(reg, BuildInfoMetric); err != nil || n != 1 {
		t.Fatalf("%d series of %s (%v), want 1", n, BuildInfoMetric, err)
	}
}
