package image

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kubext/kubext/internal/image/imagetest"
)

var testCreated = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func testSpec(t *testing.T) Spec {
	t.Helper()
	ca, err := ReadHostCABundle(HostCABundle)
	if err != nil {
		t.Fatal(err)
	}
	return Spec{Version: "v9.9.9-test", Revision: "0123456789abcdef", Source: "https://example.com/kubext",
		Created: testCreated, CABundle: ca}
}

// fakeBinaries writes stand-in files: the assembly copies bytes and does
// not care what they are; TestBuiltBinaryRuns runs real ones.
func fakeBinaries(t *testing.T, arch string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	out := map[string]string{}
	for _, n := range []string{"manager", "ip-agent", "reboot-agent", "pulsar-consumer"} {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, []byte("binary "+n+" for "+arch), 0o600); err != nil {
			t.Fatal(err)
		}
		out[n] = p
	}
	return out
}

func twoPlatforms(t *testing.T) []Platform {
	return []Platform{
		{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Binaries: fakeBinaries(t, "amd64")},
		{Platform: v1.Platform{OS: "linux", Architecture: "arm64"}, Binaries: fakeBinaries(t, "arm64")},
	}
}

type entry struct {
	hdr  *tar.Header
	body string
}

// files reads the image's filesystem back as a runtime unpacks it
// (imagetest.Walk), after checking that every layer
// is an OCI one.
func files(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		if mt, err := l.MediaType(); err != nil || mt != types.OCILayer {
			t.Fatalf("layer media type %q (%v), want %q", mt, err, types.OCILayer)
		}
	}
	out := map[string]entry{}
	imagetest.Walk(t, img, func(h *tar.Header, content io.Reader) {
		b, err := io.ReadAll(content)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(h.Name, "/")] = entry{hdr: h, body: string(b)}
	})
	return out
}

func TestIndexReadBack(t *testing.T) {
	spec := testSpec(t)
	idx, err := Index(spec, twoPlatforms(t))
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex || m.Annotations[LabelVersion] != "v9.9.9-test" {
		t.Fatalf("index: media type %q, annotations %v", m.MediaType, m.Annotations)
	}
	if len(m.Manifests) != 2 {
		t.Fatalf("index has %d manifests, want 2", len(m.Manifests))
	}
	seen := map[string]bool{}
	for _, d := range m.Manifests {
		if d.Platform == nil {
			t.Fatal("manifest without a platform in the index")
		}
		seen[d.Platform.String()] = true
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != d.Platform.Architecture || cf.OS != "linux" {
			t.Errorf("%s: config says %s/%s", d.Platform, cf.OS, cf.Architecture)
		}
		c := cf.Config
		if c.User != "65532:65532" || len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/manager" || c.WorkingDir != "/" {
			t.Errorf("%s: config user %q entrypoint %q workdir %q", d.Platform, c.User, c.Entrypoint, c.WorkingDir)
		}
		want := map[string]string{
			LabelVersion: "v9.9.9-test", LabelRevision: "0123456789abcdef", LabelSource: "https://example.com/kubext",
			LabelLicenses: "Apache-2.0", LabelTitle: "kubext", LabelCreated: "2026-03-04T05:06:07Z",
		}
		for k, v := range want {
			if c.Labels[k] != v {
				t.Errorf("%s: label %s = %q, want %q", d.Platform, k, c.Labels[k], v)
			}
		}
		if !cf.Created.Equal(testCreated) {
			t.Errorf("%s: created %s, want SOURCE_DATE_EPOCH's %s", d.Platform, cf.Created.Time, testCreated)
		}

		fs := files(t, img)
		for name, mode := range map[string]int64{
			"manager": 0o755, "ip-agent": 0o755, "reboot-agent": 0o755, "pulsar-consumer": 0o755,
			"etc/passwd": 0o644, "etc/group": 0o644, CABundlePath: 0o644, "tmp": 0o1777, "home/nonroot": 0o700,
		} {
			e, ok := fs[name]
			if !ok {
				t.Errorf("%s: no /%s in the image", d.Platform, name)
				continue
			}
			if e.hdr.Mode != mode {
				t.Errorf("%s: /%s mode %o, want %o", d.Platform, name, e.hdr.Mode, mode)
			}
			if !e.hdr.ModTime.Equal(testCreated) {
				t.Errorf("%s: /%s mtime %s, want %s", d.Platform, name, e.hdr.ModTime, testCreated)
			}
		}
		if got := fs["manager"].body; got != "binary manager for "+d.Platform.Architecture {
			t.Errorf("%s: /manager holds %q: the other platform's binary?", d.Platform, got)
		}
		if !strings.Contains(fs["etc/passwd"].body, "nonroot:x:65532:65532:") || !strings.Contains(fs["etc/group"].body, "nonroot:x:65532:") {
			t.Errorf("%s: passwd %q group %q lack nonroot 65532", d.Platform, fs["etc/passwd"].body, fs["etc/group"].body)
		}
		if fs[CABundlePath].body != string(spec.CABundle) {
			t.Errorf("%s: the CA bundle is not the host's", d.Platform)
		}
		if h := fs["home/nonroot"].hdr; h.Uid != UID || h.Gid != GID {
			t.Errorf("%s: /home/nonroot owned by %d:%d", d.Platform, h.Uid, h.Gid)
		}
		if h := fs["manager"].hdr; h.Uid != 0 || h.Uname != "" {
			t.Errorf("%s: /manager owned by %d (%q): the non-root user must not be able to replace it", d.Platform, h.Uid, h.Uname)
		}
	}
	if !seen["linux/amd64"] || !seen["linux/arm64"] {
		t.Errorf("platforms %v, want linux/amd64 and linux/arm64", seen)
	}
}

func digestOf(t *testing.T, spec Spec, ps []Platform) v1.Hash {
	t.Helper()
	idx, err := Index(spec, ps)
	if err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestIndexDeterministic(t *testing.T) {
	spec := testSpec(t)
	ps := twoPlatforms(t)
	first := digestOf(t, spec, ps)
	// Same bytes in other files, touched later, listed in another order:
	// the digest must not move.
	again := twoPlatforms(t)
	for _, p := range again {
		for _, f := range p.Binaries {
			later := time.Now().Add(time.Hour)
			if err := os.Chtimes(f, later, later); err != nil {
				t.Fatal(err)
			}
		}
	}
	if second := digestOf(t, spec, again); second != first {
		t.Fatalf("same inputs, digests %s and %s", first, second)
	}
	// And it must move when anything that matters does.
	other := spec
	other.Created = spec.Created.Add(time.Second)
	if digestOf(t, other, ps) == first {
		t.Error("a different creation time gave the same digest")
	}
	other = spec
	other.Version = "v9.9.10"
	if digestOf(t, other, ps) == first {
		t.Error("a different version gave the same digest")
	}
	changed := twoPlatforms(t)
	if err := os.WriteFile(changed[1].Binaries["ip-agent"], []byte("patched"), 0o600); err != nil {
		t.Fatal(err)
	}
	if digestOf(t, spec, changed) == first {
		t.Error("a different arm64 ip-agent gave the same digest")
	}
}

func TestIndexRefusesBadInput(t *testing.T) {
	spec := testSpec(t)
	noManager := twoPlatforms(t)
	delete(noManager[0].Binaries, "manager")
	dup := twoPlatforms(t)
	dup[1].Platform = dup[0].Platform
	badName := twoPlatforms(t)
	badName[0].Binaries["../etc/passwd"] = badName[0].Binaries["manager"]
	missing := twoPlatforms(t)
	missing[0].Binaries["ip-agent"] = filepath.Join(t.TempDir(), "nothing")
	noCA := spec
	noCA.CABundle = nil
	undated := spec
	undated.Created = time.Time{}
	for name, tc := range map[string]struct {
		spec Spec
		ps   []Platform
	}{
		"no entrypoint binary": {spec, noManager},
		"platform twice":       {spec, dup},
		"path in a name":       {spec, badName},
		"missing binary":       {spec, missing},
		"no CA bundle":         {noCA, twoPlatforms(t)},
		"no creation time":     {undated, twoPlatforms(t)},
		"no platform":          {spec, nil},
	} {
		if _, err := Index(tc.spec, tc.ps); err == nil {
			t.Errorf("%s: Index succeeded", name)
		}
	}
}

func TestReadHostCABundle(t *testing.T) {
	if _, err := ReadHostCABundle(filepath.Join(t.TempDir(), "absent.crt")); err == nil || !strings.Contains(err.Error(), "ca-certificates") {
		t.Errorf("absent bundle: %v, want an error naming the ca-certificates package", err)
	}
	notPEM := filepath.Join(t.TempDir(), "x.crt")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadHostCABundle(notPEM); err == nil {
		t.Error("a file without certificates was accepted as the CA bundle")
	}
}

func TestCommands(t *testing.T) {
	cmds, err := Commands("../..")
	if err != nil {
		t.Fatal(err)
	}
	got := "," + strings.Join(cmds, ",") + ","
	for _, want := range []string{"manager", "ip-agent", "reboot-agent", "pulsar-consumer"} {
		if !strings.Contains(got, ","+want+",") {
			t.Errorf("Commands = %v, missing %s", cmds, want)
		}
	}
	if strings.Contains(got, "kubectl-kubext") {
		t.Errorf("Commands = %v: the kubectl plugin is not a container program", cmds)
	}
}
