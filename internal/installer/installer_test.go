package installer

import (
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const pinned = "registry.example.com/team/kubext@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestRenderPinsEveryImage(t *testing.T) {
	out, err := Render("../../config/default", pinned)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{
		"kind: CustomResourceDefinition",
		"name: " + ManagerDeployment,
		"name: kubext-ip-agent",
		"name: kubext-reboot-agent",
		PulsarConsumerImageFlag + "=" + pinned,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("install.yaml lacks %q", want)
		}
	}
	for _, stale := range []string{"controller:latest", "ghcr.io/kubext/manager:"} {
		if strings.Contains(s, stale) {
			t.Errorf("install.yaml still has %q", stale)
		}
	}
}

func TestRenderRefusesATag(t *testing.T) {
	for _, ref := range []string{"registry.example.com/team/kubext:v1", "registry.example.com/team/kubext", "not a ref@sha256:xyz"} {
		if _, err := Render("../../config/default", ref); err == nil {
			t.Errorf("Render(%q) succeeded: an installer must pin a digest", ref)
		}
	}
}

// The unpinned rendering (what `kubectl apply -k config/default` would
// install) must fail the check: otherwise the check proves nothing.
func TestCheckRefusesUnpinned(t *testing.T) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "../../config/default")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(raw, pinned); err == nil {
		t.Fatal("Check accepted config/default with its release tags")
	}
	good, err := Render("../../config/default", pinned)
	if err != nil {
		t.Fatal(err)
	}
	other := strings.Replace(pinned, "@sha256:0", "@sha256:f", 1)
	for name, manifests := range map[string]string{
		"another digest": string(good),
		"one agent by tag": strings.Replace(string(good), "image: "+pinned,
			"image: registry.example.com/team/kubext:latest", 1),
		"an init container unpinned": string(good) + `---
apiVersion: v1
kind: Pod
metadata: {name: x}
spec:
  initContainers: [{name: i, image: busybox}]
  containers: [{name: c, image: ` + pinned + `}]
`,
		"no consumer image flag": strings.Replace(string(good), PulsarConsumerImageFlag+"=", "--other=", 1),
		"nothing":                "",
	} {
		want := pinned
		if name == "another digest" {
			want = other
		}
		if err := Check([]byte(manifests), want); err == nil {
			t.Errorf("%s: Check passed", name)
		}
	}
}
