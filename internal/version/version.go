// Package version holds what a kubext binary knows about its own build:
// the release version and source revision stamped in by the linker (see
// the Makefile's LDFLAGS), and the Go toolchain that built it. Every binary
// prints it with --version and the long-running ones export it as the
// kubext_build_info metric.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set with -ldflags "-X github.com/kubext/kubext/internal/version.Version=v0.2.0
// -X github.com/kubext/kubext/internal/version.Revision=<git sha>"; a plain
// `go build` leaves them empty and Get falls back to the module's build info.
var (
	Version  string
	Revision string
)

// Info describes one build.
type Info struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the stamped build information, filling what the linker did not
// set from the Go toolchain's own record of the build (VCS revision of a
// `go build` inside a clone), so an unstamped developer build still says
// which commit it is.
func Get() Info {
	info := Info{
		Version:   Version,
		Revision:  Revision,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		if info.Revision == "" {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					info.Revision = s.Value
				}
			}
		}
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	if info.Revision == "" {
		info.Revision = "unknown"
	}
	return info
}

// String is the one line `--version` prints.
func (i Info) String() string {
	return fmt.Sprintf("%s (revision %s, %s, %s)", i.Version, i.Revision, i.GoVersion, i.Platform)
}
