// Command plugin-release cross-builds kubectl-kubext and packs it for
// distribution (`make plugin-dist`): one archive per platform with the
// binary, kubectl_complete-kubext and the licence, a sha256sums.txt, and a
// krew manifest (kubext.yaml) whose checksums are those of the archives.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kubext/kubext/internal/pluginrelease"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "plugin-release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("plugin-release", flag.ContinueOnError)
	version := fs.String("version", "", "Release version, e.g. v0.2.0 (required).")
	out := fs.String("out", "dist/plugin", "Directory to write the archives and the manifest to.")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64,windows/amd64",
		"Comma-separated GOOS/GOARCH pairs to build.")
	urlBase := fs.String("url-base", "https://github.com/kubext/kubext/releases/download/VERSION",
		"Where the archives are published; VERSION is replaced by --version.")
	ldflags := fs.String("ldflags", "", "Linker flags for go build (the Makefile passes the version stamp).")
	root := fs.String("root", ".", "The repository's root.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version == "" {
		return fmt.Errorf("--version is required")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	build := filepath.Join(*out, "build")
	defer os.RemoveAll(build)
	var written []pluginrelease.Platform
	var sums strings.Builder
	for _, pair := range strings.Split(*platforms, ",") {
		goos, goarch, ok := strings.Cut(strings.TrimSpace(pair), "/")
		if !ok {
			return fmt.Errorf("--platforms: %q is not GOOS/GOARCH", pair)
		}
		bin := filepath.Join(build, goos+"-"+goarch, pluginrelease.BinaryName(goos))
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", *ldflags, "-o", bin, "./cmd/kubectl-kubext")
		cmd.Dir = *root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building kubectl-kubext for %s/%s: %w", goos, goarch, err)
		}
		p, err := Pack(*root, *out, *version, goos, goarch, bin)
		if err != nil {
			return err
		}
		written = append(written, p)
		fmt.Fprintf(&sums, "%s  %s\n", p.SHA256, filepath.Base(p.Path))
		fmt.Printf("%s %s\n", p.SHA256, p.Path)
	}
	if err := os.WriteFile(filepath.Join(*out, "sha256sums.txt"), []byte(sums.String()), 0o644); err != nil {
		return err
	}
	manifest := filepath.Join(*out, "kubext.yaml")
	if err := pluginrelease.WriteManifest(manifest, pluginrelease.Manifest{
		Version: *version, URLBase: strings.ReplaceAll(*urlBase, "VERSION", *version),
		Homepage: "https://github.com/kubext/kubext", Platforms: written,
	}); err != nil {
		return err
	}
	fmt.Println("krew manifest:", manifest)
	return nil
}

// Pack archives the plugin binary bin built for goos/goarch with the
// completion script and the licence from the repository at root.
func Pack(root, out, version, goos, goarch, bin string) (pluginrelease.Platform, error) {
	path := filepath.Join(out, pluginrelease.ArchiveName(version, goos, goarch))
	sum, err := pluginrelease.WriteArchive(path, []pluginrelease.File{
		{Name: pluginrelease.BinaryName(goos), Source: bin, Mode: 0o755},
		{Name: "kubectl_complete-kubext", Source: filepath.Join(root, "hack", "plugin-release", "kubectl_complete-kubext"), Mode: 0o755},
		{Name: "LICENSE", Source: filepath.Join(root, "LICENSE"), Mode: 0o644},
	})
	return pluginrelease.Platform{OS: goos, Arch: goarch, Path: path, SHA256: sum}, err
}
