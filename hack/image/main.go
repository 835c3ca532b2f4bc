// Command image builds, pushes and installs kubext's container image
// without a container runtime (the Makefile's docker-build, docker-push and
// build-installer targets run it):
//
//	go run ./hack/image build     --img IMG --version V --revision R   # dist/image (OCI layout), dist/image.digest
//	go run ./hack/image push      --img IMG                            # the layout's index to IMG's registry
//	go run ./hack/image installer --img IMG                            # dist/install.yaml pinned to the digest
//
// SOURCE_DATE_EPOCH (seconds) dates the image, so that rebuilding a commit
// gives the same digest; the Makefile sets it to the commit's time.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kubext/kubext/internal/image"
	"github.com/kubext/kubext/internal/installer"
)

const usage = "usage: image build|push|installer [flags] (-h for the flags of each)"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	fs := flag.NewFlagSet("image "+args[0], flag.ContinueOnError)
	img := fs.String("img", "", "Image reference, e.g. registry.example.com/kubext/manager:v0.2.0 (required).")
	layoutDir := fs.String("layout", "dist/image", "OCI layout directory.")
	insecure := fs.Bool("insecure", false, "Allow a plain-HTTP registry (any host; 127.0.0.1 and localhost are allowed anyway).")
	switch args[0] {
	case "build":
		version := fs.String("version", "", "Version stamped into the binaries and labels (required).")
		revision := fs.String("revision", "", "Source revision stamped into the binaries and labels (required).")
		source := fs.String("source", "https://github.com/kubext/kubext", "Source repository URL (org.opencontainers.image.source).")
		platforms := fs.String("platforms", "linux/amd64,linux/arm64", "Comma-separated platforms of the index.")
		binDir := fs.String("bin-dir", "dist/bin", "Where the cross-built binaries go, one directory per platform.")
		digestFile := fs.String("digest-file", "dist/image.digest", "File the index digest is written to.")
		caBundle := fs.String("ca-bundle", image.HostCABundle, "PEM CA bundle installed in the image (Debian's ca-certificates).")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return build(ctx, buildFlags{img: *img, layout: *layoutDir, version: *version, revision: *revision, source: *source,
			platforms: *platforms, binDir: *binDir, digestFile: *digestFile, caBundle: *caBundle})
	case "push":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *img == "" {
			return errors.New("push: --img is required")
		}
		idx, err := image.ReadLayout(*layoutDir)
		if err != nil {
			return err
		}
		d, err := image.Push(ctx, idx, *img, nameOptions(*insecure))
		if err != nil {
			return err
		}
		fmt.Println(d.String())
		return nil
	case "installer":
		config := fs.String("config", "config/default", "Kustomization to render.")
		out := fs.String("out", "dist/install.yaml", "Installer file to write.")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *img == "" {
			return errors.New("installer: --img is required")
		}
		idx, err := image.ReadLayout(*layoutDir)
		if err != nil {
			return err
		}
		d, err := idx.Digest()
		if err != nil {
			return err
		}
		pinned, err := image.Pin(*img, d, nameOptions(*insecure)...)
		if err != nil {
			return err
		}
		manifests, err := installer.Render(*config, pinned)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(*out, manifests, 0o644); err != nil {
			return err
		}
		fmt.Printf("%s: kubext pinned to %s\n", *out, pinned)
		return nil
	}
	return fmt.Errorf("unknown subcommand %q; %s", args[0], usage)
}

type buildFlags struct {
	img, layout, version, revision, source, platforms, binDir, digestFile, caBundle string
}

func build(ctx context.Context, f buildFlags) error {
	if f.img == "" || f.version == "" || f.revision == "" {
		return errors.New("build: --img, --version and --revision are required")
	}
	ref, err := name.ParseReference(f.img)
	if err != nil {
		return fmt.Errorf("--img: %w", err)
	}
	created, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	ca, err := image.ReadHostCABundle(f.caBundle)
	if err != nil {
		return err
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	cmds, err := image.Commands(root)
	if err != nil {
		return err
	}
	var platforms []image.Platform
	for _, s := range strings.Split(f.platforms, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("--platforms: %w", err)
		}
		out := filepath.Join(f.binDir, p.OS+"_"+p.Architecture+p.Variant)
		fmt.Fprintf(os.Stderr, "building %s for %s into %s\n", strings.Join(cmds, ", "), p.String(), out)
		bins, err := image.Build(ctx, image.BuildOptions{ModuleDir: root, Commands: cmds, Platform: *p, OutDir: out,
			Version: f.version, Revision: f.revision})
		if err != nil {
			return err
		}
		platforms = append(platforms, image.Platform{Platform: *p, Binaries: bins})
	}
	idx, err := image.Index(image.Spec{Version: f.version, Revision: f.revision, Source: f.source, Created: created, CABundle: ca}, platforms)
	if err != nil {
		return err
	}
	tag := "latest"
	if t, ok := ref.(name.Tag); ok {
		tag = t.TagStr()
	}
	d, err := image.WriteLayout(f.layout, idx, tag)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(f.digestFile), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(f.digestFile, []byte(d.String()+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: %s@%s\n", f.layout, ref.Context().Name(), d)
	return nil
}

// sourceDateEpoch is the reproducible-builds convention for "when": the
// time of the last commit, set by the Makefile.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Time{}, errors.New("SOURCE_DATE_EPOCH is not set (the Makefile sets it to the commit's time: git log -1 --format=%ct)")
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec <= 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}

func nameOptions(insecure bool) []name.Option {
	if insecure {
		return []name.Option{name.Insecure}
	}
	return nil
}
