package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// VersionPackage is the package whose Version and Revision the linker
// stamps.
const VersionPackage = "github.com/kubext/kubext/internal/version"

// NotInImage lists the cmd/ directories that are not container programs:
// the kubectl plugin runs on the user's machine.
var NotInImage = map[string]bool{"kubectl-kubext": true}

// DefaultPlatforms are the platforms of the published index.
var DefaultPlatforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// Commands lists the programs under moduleDir/cmd that go into the image:
// every directory with Go files, except NotInImage. A new cmd/<name> is in
// the next image without touching the build.
func Commands(moduleDir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(moduleDir, "cmd"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() || NotInImage[e.Name()] {
			continue
		}
		gofiles, err := filepath.Glob(filepath.Join(moduleDir, "cmd", e.Name(), "*.go"))
		if err != nil {
			return nil, err
		}
		if len(gofiles) > 0 {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("no commands under %s/cmd", moduleDir)
	}
	return out, nil
}

// LDFlags stamps version and revision into the binaries and strips symbol
// tables (-s -w) and the build ID, which are of no use in a container and
// would make a rebuild differ.
func LDFlags(version, revision string) string {
	return fmt.Sprintf("-s -w -buildid= -X %s.Version=%s -X %s.Revision=%s", VersionPackage, version, VersionPackage, revision)
}

// BuildOptions says what Build compiles.
type BuildOptions struct {
	// ModuleDir is the kubext module's root.
	ModuleDir string
	// Commands are cmd/ directory names.
	Commands []string
	Platform v1.Platform
	// OutDir receives one binary per command.
	OutDir            string
	Version, Revision string
	// Go is the go command (default "go" from $PATH).
	Go string
}

// Build cross-compiles static binaries (CGO_ENABLED=0, -trimpath, stamped)
// for one platform and returns them by command name, as Platform.Binaries
// wants them.
func Build(ctx context.Context, o BuildOptions) (map[string]string, error) {
	if len(o.Commands) == 0 {
		return nil, errors.New("build: no commands")
	}
	if o.Platform.OS == "" || o.Platform.Architecture == "" {
		return nil, errors.New("build: platform needs an OS and an architecture")
	}
	goCmd := o.Go
	if goCmd == "" {
		goCmd = "go"
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	outDir, err := filepath.Abs(o.OutDir)
	if err != nil {
		return nil, err
	}
	args := []string{"build", "-trimpath", "-ldflags", LDFlags(o.Version, o.Revision), "-o", outDir + string(filepath.Separator)}
	for _, c := range o.Commands {
		args = append(args, "./cmd/"+c)
	}
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = o.ModuleDir
	env := append(os.Environ(), "CGO_ENABLED=0", "GOOS="+o.Platform.OS, "GOARCH="+o.Platform.Architecture)
	if o.Platform.Variant != "" && o.Platform.Architecture == "arm" {
		env = append(env, "GOARM="+strings.TrimPrefix(o.Platform.Variant, "v"))
	}
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build for %s: %w\n%s", o.Platform.String(), err, stderr.String())
	}
	out := make(map[string]string, len(o.Commands))
	for _, c := range o.Commands {
		p := filepath.Join(outDir, c)
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("go build for %s left no %s: %w", o.Platform.String(), c, err)
		}
		out[c] = p
	}
	return out, nil
}
