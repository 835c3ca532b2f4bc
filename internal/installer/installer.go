// Package installer renders kubext's one-file installer, dist/install.yaml:
// config/default through kustomize, with every kubext image pinned to the
// digest of the image index that was built, and the manager told to run
// PulsarConsumers from that same digest. A tag can be moved or overwritten;
// a digest is the bytes that were built, so an install is exactly what was
// tested.
package installer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"
)

// ImageNames are the image names the manifests under config/ use and the
// installer rewrites: the kubebuilder placeholder the workloads name
// (controller:latest) and the release repository the per-component
// kustomizations set it to. Any other image in the output is an error.
var ImageNames = []string{"controller", "ghcr.io/kubext/manager"}

// ManagerDeployment is the manager's Deployment as config/default names it
// (namePrefix kubext-).
const ManagerDeployment = "kubext-controller-manager"

// PulsarConsumerImageFlag is the manager flag that names the image
// PulsarConsumers run by default.
const PulsarConsumerImageFlag = "--pulsar-consumer-image"

// Render builds the kustomization in dir (config/default) with every image
// in ImageNames replaced by pinned (repository@sha256:...) and the
// manager's PulsarConsumerImageFlag set to it, and checks the result with
// Check.
func Render(dir, pinned string) ([]byte, error) {
	d, err := name.NewDigest(pinned)
	if err != nil {
		return nil, fmt.Errorf("installer: %q is not a repository@sha256:digest reference: %w", pinned, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	// A throwaway overlay on top of config/default: the committed
	// kustomizations keep naming the release tag, and nothing under config/
	// is edited (unlike `kustomize edit set image`).
	overlay, err := os.MkdirTemp("", "kubext-installer-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(overlay) }()
	rel, err := filepath.Rel(overlay, abs)
	if err != nil {
		return nil, err
	}
	k := types.Kustomization{
		TypeMeta:  types.TypeMeta{APIVersion: types.KustomizationVersion, Kind: types.KustomizationKind},
		Resources: []string{filepath.ToSlash(rel)},
		Patches: []types.Patch{{
			Target: &types.Selector{ResId: resid.ResId{Gvk: resid.Gvk{Group: "apps", Kind: "Deployment"}, Name: ManagerDeployment}},
			Patch: fmt.Sprintf(`[{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": %q}]`,
				PulsarConsumerImageFlag+"="+d.String()),
		}},
	}
	for _, n := range ImageNames {
		k.Images = append(k.Images, types.Image{Name: n, NewName: d.Context().Name(), Digest: d.DigestStr()})
	}
	kb, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), kb, 0o600); err != nil {
		return nil, err
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
	if err != nil {
		return nil, fmt.Errorf("installer: kustomize %s: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, err
	}
	if err := Check(out, d.String()); err != nil {
		return nil, err
	}
	return out, nil
}

// Check fails unless every container image in manifests is pinned, the
// one image being pinned, and the manager's Deployment passes it as
// PulsarConsumerImageFlag: no workload can start something that was not
// built with it.
func Check(manifests []byte, pinned string) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	var problems []string
	images, managerArgs := 0, 0
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("installer: parsing the manifests: %w", err)
		}
		if obj == nil {
			continue
		}
		u := unstructured.Unstructured{Object: obj}
		where := u.GetKind() + "/" + u.GetName()
		walkContainers(obj, func(c map[string]any) {
			images++
			img, _ := c["image"].(string)
			if img != pinned {
				problems = append(problems, fmt.Sprintf("%s container %v runs %q", where, c["name"], img))
			}
			if u.GetKind() == "Deployment" && u.GetName() == ManagerDeployment {
				for _, a := range stringsOf(c["args"]) {
					if v, ok := strings.CutPrefix(a, PulsarConsumerImageFlag+"="); ok {
						managerArgs++
						if v != pinned {
							problems = append(problems, fmt.Sprintf("%s passes %s", where, a))
						}
					}
				}
			}
		})
	}
	if images == 0 {
		problems = append(problems, "no container at all")
	}
	if managerArgs != 1 {
		problems = append(problems, fmt.Sprintf("%s passes %s %d times, want once", ManagerDeployment, PulsarConsumerImageFlag, managerArgs))
	}
	if len(problems) > 0 {
		return fmt.Errorf("installer: not pinned to %s: %s", pinned, strings.Join(problems, "; "))
	}
	return nil
}

// walkContainers calls f for every container and init container of any pod
// template in obj, wherever the kind keeps it.
func walkContainers(v any, f func(map[string]any)) {
	switch t := v.(type) {
	case map[string]any:
		for k, child := range t {
			if k == "containers" || k == "initContainers" || k == "ephemeralContainers" {
				if list, ok := child.([]any); ok {
					for _, c := range list {
						if cm, ok := c.(map[string]any); ok {
							f(cm)
						}
					}
					continue
				}
			}
			walkContainers(child, f)
		}
	case []any:
		for _, child := range t {
			walkContainers(child, f)
		}
	}
}

func stringsOf(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
