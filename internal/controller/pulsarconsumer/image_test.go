package pulsarconsumer

import (
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/kubext/kubext/internal/version"
)

func TestImageTag(t *testing.T) {
	for in, want := range map[string]string{
		"v0.2.0":                  "v0.2.0",
		"v0.2.0-3-gabcdef0-dirty": "v0.2.0-3-gabcdef0-dirty",
		"v0.0.0-20260101000000-abcdef012345+dirty": "v0.0.0-20260101000000-abcdef012345-dirty",
		"devel":                  "devel",
		"-x":                     "x",
		"":                       "latest",
		"///":                    "latest",
		strings.Repeat("a", 200): strings.Repeat("a", 128),
	} {
		if got := imageTag(in); got != want {
			t.Errorf("imageTag(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDefaultImageFollowsVersion(t *testing.T) {
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	for _, v := range []string{"v1.4.0", "v0.0.0-20260101000000-abcdef012345+dirty", "weird version/with spaces"} {
		version.Version = v
		img := DefaultImage()
		// What the Deployment gets must parse as an image reference, whatever
		// the version string looked like.
		ref, err := name.NewTag(img, name.StrictValidation)
		if err != nil {
			t.Fatalf("DefaultImage() with version %q = %q: %v", v, img, err)
		}
		if ref.Context().Name() != DefaultRepository {
			t.Errorf("DefaultImage() = %q, want repository %s", img, DefaultRepository)
		}
	}
	version.Version = "v1.4.0"
	if got := DefaultImage(); got != DefaultRepository+":v1.4.0" {
		t.Errorf("DefaultImage() = %q", got)
	}
}
