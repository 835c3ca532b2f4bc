// Package imagetest reads an OCI image's filesystem back for tests, as a
// container runtime unpacks it: go-containerregistry's mutate.Extract
// flattens the layers (upper layers win, whiteouts applied).
package imagetest

import (
	"archive/tar"
	"errors"
	"io"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Walk calls fn with every entry of img's filesystem and its content,
// failing the test when the image cannot be read.
func Walk(t testing.TB, img v1.Image, fn func(h *tar.Header, content io.Reader)) {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("reading the image's filesystem: %v", err)
		}
		fn(h, tr)
	}
}
