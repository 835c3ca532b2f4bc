package main

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	"github.com/kubext/kubext/internal/pluginrelease"
)

type krewManifest struct {
	Kind string
	Spec struct {
		Version   string
		Platforms []struct {
			Selector struct{ MatchLabels map[string]string }
			URI      string
			SHA256   string
			Bin      string
		}
	}
}

// TestReleaseForThisPlatform builds the real plugin for this machine's
// platform, packs it, and checks what a user and krew would check: the
// manifest's checksum is the archive's, the archive holds the binary, the
// completion script and the licence, and the binary runs and says its
// stamped version.
func TestReleaseForThisPlatform(t *testing.T) {
	g := NewWithT(t)
	out := t.TempDir()
	const version = "v9.9.9-test"
	err := run([]string{"--version", version, "--out", out, "--root", "../..",
		"--platforms", runtime.GOOS + "/" + runtime.GOARCH,
		"--ldflags", "-X github.com/kubext/kubext/internal/version.Version=" + version})
	g.Expect(err).NotTo(HaveOccurred())

	data, err := os.ReadFile(filepath.Join(out, "kubext.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var m krewManifest
	g.Expect(yaml.UnmarshalStrict(data, &struct {
		APIVersion string `json:"apiVersion"`
		Kind       string
		Metadata   struct{ Name string }
		Spec       any
	}{})).To(Succeed())
	g.Expect(yaml.Unmarshal(data, &m)).To(Succeed())
	g.Expect(m.Kind).To(Equal("Plugin"))
	g.Expect(m.Spec.Version).To(Equal(version))
	g.Expect(m.Spec.Platforms).To(HaveLen(1))
	p := m.Spec.Platforms[0]
	g.Expect(p.Selector.MatchLabels).To(Equal(map[string]string{"os": runtime.GOOS, "arch": runtime.GOARCH}))
	name := pluginrelease.ArchiveName(version, runtime.GOOS, runtime.GOARCH)
	g.Expect(p.URI).To(Equal("https://github.com/kubext/kubext/releases/download/" + version + "/" + name))
	archive := filepath.Join(out, name)
	sum, err := pluginrelease.SHA256File(archive)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.SHA256).To(Equal(sum), "the manifest's checksum is the archive's")
	sums, err := os.ReadFile(filepath.Join(out, "sha256sums.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(sums)).To(Equal(sum + "  " + name + "\n"))

	dir := t.TempDir()
	modes := extract(t, archive, dir)
	g.Expect(modes).To(Equal(map[string]os.FileMode{
		pluginrelease.BinaryName(runtime.GOOS): 0o755, "kubectl_complete-kubext": 0o755, "LICENSE": 0o644,
	}))
	cmdOut, err := exec.Command(filepath.Join(dir, pluginrelease.BinaryName(runtime.GOOS)), "version", "--client").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(cmdOut))
	g.Expect(string(cmdOut)).To(HavePrefix("Plugin: " + version + " "))
	script, err := os.ReadFile(filepath.Join(dir, "kubectl_complete-kubext"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(script)).To(ContainSubstring(`exec kubectl kubext __complete "$@"`))

	// The same inputs pack to the same bytes: a rebuild can be checked
	// against the published checksum.
	bin := filepath.Join(dir, pluginrelease.BinaryName(runtime.GOOS))
	again, err := Pack("../..", t.TempDir(), version, runtime.GOOS, runtime.GOARCH, bin)
	g.Expect(err).NotTo(HaveOccurred())
	once, err := Pack("../..", t.TempDir(), version, runtime.GOOS, runtime.GOARCH, bin)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.SHA256).To(Equal(once.SHA256))
}

func TestBadArguments(t *testing.T) {
	g := NewWithT(t)
	g.Expect(run([]string{"--out", t.TempDir()})).To(MatchError("--version is required"))
	g.Expect(run([]string{"--version", "v1.0.0", "--out", t.TempDir(), "--platforms", "linux"})).
		To(MatchError(ContainSubstring(`"linux" is not GOOS/GOARCH`)))
}

// extract unpacks a .tar.gz into dir and returns each entry's mode.
func extract(t *testing.T, archive, dir string) map[string]os.FileMode {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	modes := map[string]os.FileMode{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return modes
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(hdr.Name, "/") || strings.Contains(hdr.Name, "..") {
			t.Fatalf("archive entry %q is not a plain file name", hdr.Name)
		}
		mode := os.FileMode(hdr.Mode).Perm()
		modes[hdr.Name] = mode
		w, err := os.OpenFile(filepath.Join(dir, hdr.Name), os.O_CREATE|os.O_WRONLY, mode)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, tr); err != nil {
			t.Fatal(err)
		}
		_ = w.Close()
	}
}
