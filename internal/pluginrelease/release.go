// Package pluginrelease packs the kubectl-kubext plugin for distribution:
// one reproducible .tar.gz per platform (the binary, its completion script
// and the licence) and a krew plugin manifest whose sha256 sums are those
// of the archives written, so the two cannot drift apart.
package pluginrelease

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"
	"time"
)

// File is one file of an archive.
type File struct {
	// Name is its path inside the archive.
	Name string
	// Source is the file to copy in.
	Source string
	// Mode is its permission bits in the archive.
	Mode int64
}

// Platform is one archive: for which OS and architecture, where it was
// written, and its checksum.
type Platform struct {
	OS, Arch string
	// Path is the archive written.
	Path string
	// SHA256 is the archive's checksum, hex.
	SHA256 string
}

// epoch is the modification time of every archive entry, so that the same
// inputs give the same archive bytes (and the same checksum) on any machine.
var epoch = time.Unix(0, 0).UTC()

// WriteArchive writes files as a gzipped tar to path and returns its
// sha256. Entries are sorted by name, owned by root, dated epoch.
func WriteArchive(path string, files []File) (string, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	gz.ModTime = epoch
	tw := tar.NewWriter(gz)
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, f := range sorted {
		data, err := os.ReadFile(f.Source)
		if err != nil {
			return "", fmt.Errorf("reading %s for the archive: %w", f.Source, err)
		}
		hdr := &tar.Header{Name: f.Name, Mode: f.Mode, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return "", err
		}
		if _, err := tw.Write(data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

// SHA256File is the hex sha256 of the file at path.
func SHA256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ArchiveName is the file name of the archive of version for os/arch.
func ArchiveName(version, goos, goarch string) string {
	return fmt.Sprintf("kubectl-kubext_%s_%s_%s.tar.gz", version, goos, goarch)
}

// BinaryName is the plugin's executable name on goos.
func BinaryName(goos string) string {
	if goos == "windows" {
		return "kubectl-kubext.exe"
	}
	return "kubectl-kubext"
}

// Manifest is what the krew manifest says besides the platforms.
type Manifest struct {
	Version string
	// URLBase is where the archives are published; each platform's uri is
	// URLBase/ArchiveName.
	URLBase   string
	Homepage  string
	Platforms []Platform
}

var manifestTemplate = template.Must(template.New("krew").Funcs(template.FuncMap{"bin": BinaryName}).Parse(`apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: kubext
spec:
  version: {{ .Version }}
  homepage: {{ .Homepage }}
  shortDescription: Inspect and operate kubext's static IPs and node reboots
  description: |
    Explain why a static IP is (or is not) where it is, move it to a standby,
    and ask for, plan, follow, pause and resume coordinated node reboots, for
    clusters running kubext. Shell completion of names: put
    kubectl_complete-kubext (in the archive) on your PATH.
  platforms:
{{- range .Platforms }}
    - selector:
        matchLabels:
          os: {{ .OS }}
          arch: {{ .Arch }}
      uri: {{ $.URLBase }}/{{ .Path }}
      sha256: {{ .SHA256 }}
      bin: {{ bin .OS }}
{{- end }}
`))

// WriteManifest writes the krew manifest for m to path. Each platform's
// Path is taken as its archive's file name in the published URLBase.
func WriteManifest(path string, m Manifest) error {
	if m.Version == "" || !strings.HasPrefix(m.Version, "v") {
		return fmt.Errorf("version %q: krew wants a semantic version starting with v", m.Version)
	}
	platforms := make([]Platform, len(m.Platforms))
	for i, p := range m.Platforms {
		if len(p.SHA256) != 64 {
			return fmt.Errorf("platform %s/%s has no sha256", p.OS, p.Arch)
		}
		p.Path = filepath.Base(p.Path)
		platforms[i] = p
	}
	m.Platforms = platforms
	m.URLBase = strings.TrimSuffix(m.URLBase, "/")
	var buf bytes.Buffer
	if err := manifestTemplate.Execute(&buf, m); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
