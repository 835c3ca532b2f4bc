package main

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kubext/kubext/internal/image"
	"github.com/kubext/kubext/internal/image/imagetest"
	"github.com/kubext/kubext/internal/installer"
)

const (
	proofVersion  = "v9.9.9-proof"
	proofRevision = "0123456789abcdef0123456789abcdef01234567"
)

// TestImagePushInstall is the whole user path with the real binaries, for
// this machine's architecture only (cross-building both costs minutes; the
// index of two platforms is checked in internal/image): build the image,
// run a binary taken out of it, push it to a registry on 127.0.0.1, pull
// it back by digest and render the installer pinned to that digest.
func TestImagePushInstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	t.Chdir("../..")
	t.Setenv("SOURCE_DATE_EPOCH", "1767225600")
	dist := t.TempDir()
	platform := "linux/" + runtime.GOARCH

	reg := httptest.NewServer(registry.New(registry.Logger(discard())))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	img := host + "/kubext/manager:proof"

	buildArgs := []string{"build", "--img", img, "--version", proofVersion, "--revision", proofRevision,
		"--platforms", platform, "--layout", filepath.Join(dist, "image"), "--bin-dir", filepath.Join(dist, "bin"),
		"--digest-file", filepath.Join(dist, "image.digest")}
	if err := run(ctx, buildArgs); err != nil {
		t.Fatal(err)
	}
	idx, err := image.ReadLayout(filepath.Join(dist, "image"))
	if err != nil {
		t.Fatal(err)
	}
	built, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dist, "image.digest")); err != nil || strings.TrimSpace(string(b)) != built.String() {
		t.Fatalf("image.digest = %q (%v), want %s", b, err, built)
	}

	// Every binary, taken out of the image's layer, says the stamped version.
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Platform == nil || m.Manifests[0].Platform.String() != platform {
		t.Fatalf("index manifests %+v, want one for %s", m.Manifests, platform)
	}
	one, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := image.Commands(".")
	if err != nil {
		t.Fatal(err)
	}
	extracted := extract(t, one, cmds)
	for _, c := range cmds {
		out, err := exec.CommandContext(ctx, extracted[c], "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("/%s --version: %v\n%s", c, err, out)
		}
		if want := proofVersion + " (revision " + proofRevision + ", "; !strings.HasPrefix(string(out), want) {
			t.Errorf("/%s --version printed %q, want it to start with %q", c, out, want)
		}
	}

	// A rebuild of the same commit is the same image.
	if err := run(ctx, buildArgs); err != nil {
		t.Fatal(err)
	}
	if again, err := os.ReadFile(filepath.Join(dist, "image.digest")); err != nil || strings.TrimSpace(string(again)) != built.String() {
		t.Fatalf("rebuilt digest %q (%v), first build %s", again, err, built)
	}

	// Push, then pull back by digest: the registry holds the bytes built.
	if err := run(ctx, []string{"push", "--img", img, "--layout", filepath.Join(dist, "image")}); err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewDigest(host + "/kubext/manager@" + built.String())
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pulling %s: %v", ref, err)
	}
	if d, _ := pulled.Digest(); d != built {
		t.Fatalf("pulled %s, pushed %s", d, built)
	}
	byTag, err := remote.Head(ref.Context().Tag("proof"), remote.WithContext(ctx))
	if err != nil || byTag.Digest != built {
		t.Fatalf("tag proof points at %v (%v), want %s", byTag, err, built)
	}
	pulledImg, err := pulled.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if cf, err := pulledImg.ConfigFile(); err != nil || cf.Config.Labels[image.LabelVersion] != proofVersion {
		t.Fatalf("pulled image config %+v (%v)", cf, err)
	}

	// The installer pins every image to that digest.
	out := filepath.Join(dist, "install.yaml")
	if err := run(ctx, []string{"installer", "--img", img, "--layout", filepath.Join(dist, "image"),
		"--config", "config/default", "--out", out}); err != nil {
		t.Fatal(err)
	}
	manifests, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := installer.Check(manifests, ref.String()); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(manifests), "\n") {
		if _, after, ok := strings.Cut(line, "image: "); ok {
			n++
			if after != ref.String() {
				t.Errorf("install.yaml: %q, want %s", strings.TrimSpace(line), ref)
			}
		}
	}
	if n < 3 {
		t.Errorf("install.yaml has %d images, want the manager's and both agents'", n)
	}
	if bytes.Contains(manifests, []byte("ghcr.io/kubext")) || bytes.Contains(manifests, []byte("controller:latest")) {
		t.Error("install.yaml still names an unpinned kubext image")
	}
}

func TestPushRefusesAnotherDigest(t *testing.T) {
	reg := httptest.NewServer(registry.New(registry.Logger(discard())))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	idx, err := image.Index(image.Spec{Version: "v1", Revision: "r", Created: time.Unix(1, 0), CABundle: []byte("-----BEGIN CERTIFICATE-----")},
		[]image.Platform{{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Binaries: map[string]string{"manager": writeFile(t, "m")}}})
	if err != nil {
		t.Fatal(err)
	}
	wrong := host + "/kubext/manager@sha256:" + strings.Repeat("0", 64)
	if _, err := image.Push(context.Background(), idx, wrong, nil); err == nil {
		t.Fatal("pushed an index under a digest that is not its own")
	}
}

func TestBuildNeedsSourceDateEpoch(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "")
	err := run(context.Background(), []string{"build", "--img", "example.com/k:v", "--version", "v", "--revision", "r"})
	if err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Fatalf("build without SOURCE_DATE_EPOCH: %v", err)
	}
	if err := run(context.Background(), []string{"nonsense"}); err == nil {
		t.Fatal("unknown subcommand accepted")
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// extract writes the named binaries of img's filesystem, as a runtime
// unpacks it (imagetest.Walk), to a directory, with
// the mode the image gives them, and checks that mode.
func extract(t *testing.T, img v1.Image, names []string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]string{}
	imagetest.Walk(t, img, func(h *tar.Header, content io.Reader) {
		if !want[h.Name] {
			return
		}
		if h.Mode != 0o755 || h.Typeflag != tar.TypeReg {
			t.Errorf("/%s: type %c mode %o, want a 0755 file", h.Name, h.Typeflag, h.Mode)
		}
		p := filepath.Join(dir, h.Name)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, os.FileMode(h.Mode))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, content); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		out[h.Name] = p
	})
	for _, n := range names {
		if out[n] == "" {
			t.Fatalf("no /%s in the image", n)
		}
	}
	return out
}

func discard() *log.Logger { return log.New(io.Discard, "", 0) }
