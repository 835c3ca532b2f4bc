package image

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// refNameAnnotation names an index in an OCI layout (image-spec
// image-layout.md), so that `skopeo copy oci:dist/image:<tag>` and crane
// find it.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// WriteLayout replaces dir with an OCI image layout holding idx, named tag.
// The layout holds exactly one index: an earlier build's blobs do not
// linger.
func WriteLayout(dir string, idx v1.ImageIndex, tag string) (v1.Hash, error) {
	if err := os.RemoveAll(dir); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	var opts []layout.Option
	if tag != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{refNameAnnotation: tag}))
	}
	if err := p.AppendIndex(idx, opts...); err != nil {
		return v1.Hash{}, fmt.Errorf("writing the OCI layout %s: %w", dir, err)
	}
	return idx.Digest()
}

// ReadLayout returns the one image index of the OCI layout in dir, as
// WriteLayout left it.
func ReadLayout(dir string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the OCI layout %s (run make docker-build first): %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 || m.Manifests[0].MediaType != types.OCIImageIndex {
		return nil, fmt.Errorf("OCI layout %s: want exactly one image index, found %d manifests", dir, len(m.Manifests))
	}
	return top.ImageIndex(m.Manifests[0].Digest)
}

// Push uploads idx, with every image and layer it holds, to ref (a tag or
// a digest reference), authenticating like docker and crane do (the
// docker config's credentials and helpers). It returns the pushed digest,
// which is idx's: the registry holds the very bytes built.
func Push(ctx context.Context, idx v1.ImageIndex, ref string, nameOpts []name.Option, opts ...remote.Option) (name.Digest, error) {
	r, err := name.ParseReference(ref, nameOpts...)
	if err != nil {
		return name.Digest{}, fmt.Errorf("image reference %q: %w", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	if dr, ok := r.(name.Digest); ok && dr.DigestStr() != d.String() {
		return name.Digest{}, fmt.Errorf("%s names digest %s, but the built index is %s", ref, dr.DigestStr(), d)
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if err := remote.WriteIndex(r, idx, opts...); err != nil {
		return name.Digest{}, fmt.Errorf("pushing %s: %w", r, err)
	}
	return r.Context().Digest(d.String()), nil
}

// Pin returns repo@digest for the image reference ref (tag or digest),
// the form every manifest must use: a tag can move, a digest cannot.
func Pin(ref string, digest v1.Hash, nameOpts ...name.Option) (string, error) {
	r, err := name.ParseReference(ref, nameOpts...)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	if digest.Algorithm != "sha256" || len(digest.Hex) != 64 {
		return "", errors.New("pin: not a sha256 digest: " + digest.String())
	}
	return r.Context().Name() + "@" + digest.String(), nil
}
