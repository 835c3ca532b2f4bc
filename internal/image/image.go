// Package image assembles kubext's container image without a container
// runtime: an OCI image index with one image per platform, built from
// scratch out of kubext's static binaries, a CA bundle and the files a
// non-root user needs. Nothing is pulled: there is no base image.
//
// One image holds every kubext binary (/manager, /ip-agent, /reboot-agent,
// /pulsar-consumer, ...); each workload picks its binary with `command`. The
// manager and the node agents talk through the API (heartbeat Leases, IP and
// RebootOrder status) and must speak the same version of that protocol: one
// image, pinned by one digest, makes a mixed install impossible, and a node
// pulls it once for all its agents.
//
// The assembly is deterministic: the same binaries, CA bundle and Spec give
// the same index digest (tar headers carry Spec.Created and no owner names,
// entries are sorted, gzip writes no timestamp).
package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// UID and GID run every kubext process: the conventional "nonroot" of
	// distroless images, so that existing PodSecurity/runAsUser policies
	// written for those apply unchanged.
	UID = 65532
	// GID is the primary group of UID.
	GID = 65532
	// User is the image config's User.
	User = "65532:65532"
	// Entrypoint is the binary a container runs without a command.
	Entrypoint = "/manager"
	// CABundlePath is where the CA bundle lands in the image, the path Go's
	// crypto/x509 looks at first on Linux (pulsar+ssl and the AWS SDK need it).
	CABundlePath = "etc/ssl/certs/ca-certificates.crt"
	// HostCABundle is the Debian ca-certificates bundle the build copies.
	HostCABundle = "/etc/ssl/certs/ca-certificates.crt"
	// License is the SPDX identifier of kubext's license.
	License = "Apache-2.0"
	// Title names the image.
	Title = "kubext"
)

// OCI annotation keys (image-spec annotations.md) set as config labels and
// index annotations.
const (
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelSource   = "org.opencontainers.image.source"
	LabelLicenses = "org.opencontainers.image.licenses"
	LabelTitle    = "org.opencontainers.image.title"
	LabelCreated  = "org.opencontainers.image.created"
)

// Spec says what goes into the image besides the binaries.
type Spec struct {
	Version  string
	Revision string
	// Source is the repository URL (org.opencontainers.image.source).
	Source string
	// Created is the time stamped on the config, the labels and every file:
	// SOURCE_DATE_EPOCH or the commit's time, never the wall clock, so that
	// a rebuild gives the same digest.
	Created time.Time
	// CABundle is the PEM bundle installed at /etc/ssl/certs.
	CABundle []byte
}

// Platform is one image of the index: a platform and its binaries, by the
// name they take at the image's root (manager → /manager) and the file that
// holds each.
type Platform struct {
	Platform v1.Platform
	Binaries map[string]string
}

// ReadHostCABundle reads the host's Debian CA bundle, saying how to get one
// when it is missing: an image without it cannot reach pulsar+ssl brokers
// or AWS.
func ReadHostCABundle(file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the CA bundle for the image: %w (on Debian/Ubuntu: apt-get install ca-certificates)", err)
	}
	if !strings.Contains(string(b), "-----BEGIN CERTIFICATE-----") {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return b, nil
}

// Labels are the OCI labels of every image of the index.
func (s Spec) Labels() map[string]string {
	return map[string]string{
		LabelVersion:  s.Version,
		LabelRevision: s.Revision,
		LabelSource:   s.Source,
		LabelLicenses: License,
		LabelTitle:    Title,
		LabelCreated:  s.Created.UTC().Format(time.RFC3339),
	}
}

func (s Spec) validate() error {
	switch {
	case s.Version == "":
		return errors.New("image spec: no version")
	case s.Revision == "":
		return errors.New("image spec: no revision")
	case s.Created.IsZero():
		return errors.New("image spec: no creation time (set SOURCE_DATE_EPOCH)")
	case len(s.CABundle) == 0:
		return errors.New("image spec: no CA bundle")
	}
	return nil
}

// Index assembles the image index: one image per platform, in the order
// given.
func Index(spec Spec, platforms []Platform) (v1.ImageIndex, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if len(platforms) == 0 {
		return nil, errors.New("image index: no platform")
	}
	created := spec.Created.UTC().Truncate(time.Second)
	base, err := layer(baseFiles(spec.CABundle), created)
	if err != nil {
		return nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]bool{}
	for _, p := range platforms {
		if seen[p.Platform.String()] {
			return nil, fmt.Errorf("image index: platform %s twice", p.Platform.String())
		}
		seen[p.Platform.String()] = true
		img, err := platformImage(spec, created, base, p)
		if err != nil {
			return nil, fmt.Errorf("image for %s: %w", p.Platform.String(), err)
		}
		platform := p.Platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &platform}})
	}
	annotated, ok := mutate.Annotations(idx, spec.Labels()).(v1.ImageIndex)
	if !ok {
		return nil, errors.New("image index: annotations lost the index type")
	}
	return annotated, nil
}

func platformImage(spec Spec, created time.Time, base v1.Layer, p Platform) (v1.Image, error) {
	if _, ok := p.Binaries[path.Base(Entrypoint)]; !ok {
		return nil, fmt.Errorf("no %s binary: it is the entrypoint", Entrypoint)
	}
	var files []file
	for name, src := range p.Binaries {
		if name == "" || strings.ContainsAny(name, "/.") {
			return nil, fmt.Errorf("binary name %q: want a plain name", name)
		}
		fi, err := os.Stat(src)
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("binary %s: %s is not a regular file", name, src)
		}
		files = append(files, file{name: name, mode: 0o755, size: fi.Size(), open: fileOpener(src)})
	}
	bins, err := layer(files, created)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	names := make([]string, 0, len(p.Binaries))
	for n := range p.Binaries {
		names = append(names, "/"+n)
	}
	sort.Strings(names)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: created},
			CreatedBy: "kubext image: /etc/passwd, /etc/group, CA bundle, /tmp, /home/nonroot", Comment: "no base image"}},
		mutate.Addendum{Layer: bins, History: v1.History{Created: v1.Time{Time: created},
			CreatedBy: "kubext image: " + strings.Join(names, " ")}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = p.Platform.Architecture
	cf.OS = p.Platform.OS
	cf.Variant = p.Platform.Variant
	cf.Created = v1.Time{Time: created}
	cf.Config = v1.Config{
		User:       User,
		Entrypoint: []string{Entrypoint},
		WorkingDir: "/",
		Env:        []string{"PATH=/", "SSL_CERT_FILE=/" + CABundlePath},
		Labels:     spec.Labels(),
	}
	return mutate.ConfigFile(img, cf)
}

// file is one tar entry; open is nil for directories and set for regular
// files.
type file struct {
	name     string
	mode     int64
	uid, gid int
	size     int64
	dir      bool
	open     func() (io.ReadCloser, error)
}

func fileOpener(src string) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return os.Open(src) }
}

func bytesFile(name string, mode int64, b []byte) file {
	return file{name: name, mode: mode, size: int64(len(b)), open: func() (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(string(b))), nil
	}}
}

// baseFiles are what a static Go program running as nonroot needs around
// it: user and group names (os/user, logs), a CA bundle, a writable /tmp
// and a home directory.
func baseFiles(caBundle []byte) []file {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n" +
		fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", UID, GID)
	group := "root:x:0:\n" + fmt.Sprintf("nonroot:x:%d:\n", GID)
	return []file{
		{name: "etc", mode: 0o755, dir: true},
		bytesFile("etc/group", 0o644, []byte(group)),
		bytesFile("etc/passwd", 0o644, []byte(passwd)),
		{name: "etc/ssl", mode: 0o755, dir: true},
		{name: "etc/ssl/certs", mode: 0o755, dir: true},
		bytesFile(CABundlePath, 0o644, caBundle),
		{name: "home", mode: 0o755, dir: true},
		{name: "home/nonroot", mode: 0o700, uid: UID, gid: GID, dir: true},
		{name: "tmp", mode: 0o1777, dir: true},
	}
}

// layer makes a gzip-compressed OCI layer of files. The tar stream is
// written anew each time the layer is read (digesting, compressing,
// uploading), so binaries are streamed from disk rather than held in
// memory; it is the same stream every time.
func layer(files []file, created time.Time) (v1.Layer, error) {
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	for i := 1; i < len(files); i++ {
		if files[i].name == files[i-1].name {
			return nil, fmt.Errorf("layer: %s twice", files[i].name)
		}
	}
	opener := func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeTar(pw, files, created)) }()
		return pr, nil
	}
	return tarball.LayerFromOpener(opener, tarball.WithMediaType(types.OCILayer))
}

func writeTar(w io.Writer, files []file, created time.Time) error {
	tw := tar.NewWriter(w)
	for _, f := range files {
		h := &tar.Header{
			Name:    f.name,
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.gid,
			ModTime: created,
			Format:  tar.FormatPAX,
		}
		if f.dir {
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = f.size
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if f.dir {
			continue
		}
		rc, err := f.open()
		if err != nil {
			return err
		}
		n, err := io.Copy(tw, rc)
		_ = rc.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		if n != f.size {
			// The file changed between Stat and now: a layer whose digest
			// no longer matches its content must not be produced.
			return fmt.Errorf("%s: %d bytes, expected %d (changed while building?)", f.name, n, f.size)
		}
	}
	return tw.Close()
}
