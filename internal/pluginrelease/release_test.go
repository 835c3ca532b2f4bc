package pluginrelease

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestWriteManifestRefusesWhatKrewWould(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "kubext.yaml")
	ok := Platform{OS: "linux", Arch: "amd64", Path: "/tmp/x/a.tar.gz", SHA256: strings.Repeat("a", 64)}
	g.Expect(WriteManifest(path, Manifest{Version: "1.0.0", Platforms: []Platform{ok}})).
		To(MatchError(ContainSubstring("krew wants a semantic version starting with v")))
	g.Expect(WriteManifest(path, Manifest{Version: "v1.0.0", Platforms: []Platform{{OS: "linux", Arch: "arm64"}}})).
		To(MatchError("platform linux/arm64 has no sha256"))
	g.Expect(WriteManifest(path, Manifest{Version: "v1.0.0", URLBase: "https://example.com/r/", Platforms: []Platform{
		ok, {OS: "windows", Arch: "amd64", Path: "b.tar.gz", SHA256: strings.Repeat("b", 64)},
	}})).To(Succeed())
	data, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(ContainSubstring("uri: https://example.com/r/a.tar.gz\n"))
	g.Expect(string(data)).To(ContainSubstring("bin: kubectl-kubext.exe\n"))
}

func TestArchiveChecksumIsTheFiles(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "f")
	g.Expect(os.WriteFile(src, []byte("x"), 0o600)).To(Succeed())
	sum, err := WriteArchive(filepath.Join(dir, "a.tar.gz"), []File{{Name: "f", Source: src, Mode: 0o644}})
	g.Expect(err).NotTo(HaveOccurred())
	onDisk, err := SHA256File(filepath.Join(dir, "a.tar.gz"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sum).To(Equal(onDisk))
	_, err = WriteArchive(filepath.Join(dir, "b.tar.gz"), []File{{Name: "g", Source: filepath.Join(dir, "missing")}})
	g.Expect(err).To(MatchError(ContainSubstring("reading " + filepath.Join(dir, "missing"))))
}
