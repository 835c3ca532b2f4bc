package version

import (
	"runtime"
	"strings"
	"testing"
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
