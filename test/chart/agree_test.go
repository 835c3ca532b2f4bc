package chart

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestChartAgreesWithConfigDefault renders the chart with its default values
// and config/default, and checks that they install the same thing: the same
// objects (kind and name; namespaced ones in the release namespace), the same
// CRDs, the same RBAC (rules compared as sets of single permissions), the
// same admission policies and webhooks, and the same workloads (command,
// args as a set, env, image, ports, security context, host namespaces,
// volumes by source and mount path, resources). Labels the chart adds
// (helm.sh/chart, instance, version) are not compared.
//
// The one thing only config/default renders is the Namespace: Helm installs
// into a namespace it does not own (--create-namespace makes a bare one); the
// chart's NOTES and docs/helm.md give the pod-security labels to put on it.
//
// When this fails, config/ and the chart disagree: fix the one that is
// wrong. RBAC rules, policies, webhooks and CRDs are copies (make chart-sync);
// the workloads are templated (charts/kubext/templates) from values.yaml.
func TestChartAgreesWithConfigDefault(t *testing.T) {
	chart := index(t, "helm template", helmTemplate(t))
	config := index(t, "kustomize config/default", kustomizeDefault(t))

	var problems []string
	for key, c := range config {
		if c.GetKind() == "Namespace" {
			continue
		}
		h, ok := chart[key]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: in config/default, not rendered by the chart", key))
			continue
		}
		problems = append(problems, compare(key, c, h)...)
	}
	for key := range chart {
		if _, ok := config[key]; !ok {
			problems = append(problems, fmt.Sprintf("%s: rendered by the chart with default values, not in config/default", key))
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
	vwc := "ValidatingWebhookConfiguration/" + release + "-validating-webhook-configuration"
	if _, inChart := chart[vwc]; inChart && config[vwc] == nil {
		t.Log("config/default does not deploy the validating webhooks (config/webhook), the chart does by default " +
			"(webhooks.enabled: issue 11 turns webhooks on): include ../webhook and its manager patches in config/default")
	}
	if len(problems) > 0 {
		t.Logf("%d differences between `helm template %s charts/kubext -n %s` (default values) and `kubectl kustomize config/default`",
			len(problems), release, namespace)
	}
}

// index maps kind/name to the object and checks namespaced objects are in
// the release namespace.
func index(t *testing.T, what string, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		key := o.GetKind() + "/" + o.GetName()
		if _, dup := m[key]; dup {
			t.Errorf("%s renders %s twice", what, key)
		}
		if ns := o.GetNamespace(); ns != "" && ns != namespace && !clusterScoped[o.GetKind()] {
			t.Errorf("%s renders %s in namespace %s, not %s", what, key, ns, namespace)
		}
		m[key] = o
	}
	if len(m) == 0 {
		t.Fatalf("%s rendered nothing", what)
	}
	return m
}

var clusterScoped = map[string]bool{
	"ClusterRole": true, "ClusterRoleBinding": true, "CustomResourceDefinition": true, "Namespace": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
	"MutatingAdmissionPolicy": true, "MutatingAdmissionPolicyBinding": true,
	"ValidatingWebhookConfiguration": true, "MutatingWebhookConfiguration": true,
	"FlowSchema": true,
}

// compare returns what differs between config/default's object c and the
// chart's h, in the aspects that matter for each kind.
func compare(key string, c, h *unstructured.Unstructured) []string {
	cn, hn := normalize(c), normalize(h)
	var out []string
	for _, field := range sortedKeys(cn, hn) {
		cv, hv := canonical(cn[field]), canonical(hn[field])
		if cv != hv {
			out = append(out, fmt.Sprintf("%s %s differs:\n  config/default: %s\n  chart:          %s", key, field, cv, hv))
		}
	}
	return out
}

func sortedKeys(ms ...map[string]any) []string {
	var keys []string
	for _, m := range ms {
		for k := range m {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

// canonical is a stable JSON form (maps have sorted keys in encoding/json).
func canonical(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return string(b)
}

// normalize picks the aspects of an object that must agree, by kind.
func normalize(o *unstructured.Unstructured) map[string]any {
	obj := o.Object
	switch o.GetKind() {
	case "CustomResourceDefinition":
		return map[string]any{"spec": obj["spec"]}
	case "ClusterRole", "Role":
		return map[string]any{"rules": ruleAtoms(obj["rules"]), "aggregation": aggregation(o.GetLabels())}
	case "ClusterRoleBinding", "RoleBinding":
		return map[string]any{"roleRef": obj["roleRef"], "subjects": sortedJSON(obj["subjects"])}
	case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding":
		// kustomize re-emits the policies' folded CEL scalars with extra
		// line breaks; whitespace is insignificant in CEL.
		return map[string]any{"spec": squeezeSpace(obj["spec"])}
	case "PodDisruptionBudget", "FlowSchema":
		return map[string]any{"spec": obj["spec"]}
	case "ValidatingWebhookConfiguration":
		hooks, _, _ := unstructured.NestedSlice(obj, "webhooks")
		for _, w := range hooks {
			if wm, ok := w.(map[string]any); ok {
				unstructured.RemoveNestedField(wm, "clientConfig", "caBundle")
			}
		}
		return map[string]any{"webhooks": hooks}
	case "Service":
		return map[string]any{"ports": sortedJSON(nested(obj, "spec", "ports")), "selector": nested(obj, "spec", "selector"), "type": nested(obj, "spec", "type")}
	case "ConfigMap":
		return map[string]any{"data": obj["data"]}
	case "Deployment", "DaemonSet":
		return workload(obj)
	}
	return map[string]any{}
}

var spaces = regexp.MustCompile(`\s+`)

// squeezeSpace turns every run of white space in the strings of v into one
// space.
func squeezeSpace(v any) any {
	switch x := v.(type) {
	case string:
		return strings.TrimSpace(spaces.ReplaceAllString(x, " "))
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = squeezeSpace(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = squeezeSpace(e)
		}
		return out
	}
	return v
}

func nested(obj map[string]any, fields ...string) any {
	v, _, _ := unstructured.NestedFieldNoCopy(obj, fields...)
	return v
}

// ruleAtoms expands RBAC rules into single permissions
// (group resource/name verb, or URL verb), sorted: two rule lists that grant
// the same are equal however they are grouped.
func ruleAtoms(rules any) []string {
	var atoms []string
	list, _ := rules.([]any)
	for _, r := range list {
		rm, _ := r.(map[string]any)
		verbs := strs(rm["verbs"])
		if urls := strs(rm["nonResourceURLs"]); len(urls) > 0 {
			for _, u := range urls {
				for _, v := range verbs {
					atoms = append(atoms, "url "+u+" "+v)
				}
			}
			continue
		}
		names := strs(rm["resourceNames"])
		if len(names) == 0 {
			names = []string{"*"}
		}
		for _, g := range strs(rm["apiGroups"]) {
			for _, res := range strs(rm["resources"]) {
				for _, n := range names {
					for _, v := range verbs {
						atoms = append(atoms, fmt.Sprintf("%q %s/%s %s", g, res, n, v))
					}
				}
			}
		}
	}
	sort.Strings(atoms)
	return slices.Compact(atoms)
}

func strs(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

func aggregation(labels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		if strings.HasPrefix(k, "rbac.authorization.k8s.io/aggregate-to-") {
			out[k] = v
		}
	}
	return out
}

// sortedJSON sorts a list by its elements' JSON form.
func sortedJSON(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		out = append(out, canonical(x))
	}
	sort.Strings(out)
	return out
}

// workload picks what a Deployment or DaemonSet runs and with what rights.
func workload(obj map[string]any) map[string]any {
	pod, _, _ := unstructured.NestedMap(obj, "spec", "template", "spec")
	w := map[string]any{
		"replicas":           nested(obj, "spec", "replicas"),
		"selector":           nested(obj, "spec", "selector"),
		"serviceAccountName": pod["serviceAccountName"],
		"hostNetwork":        pod["hostNetwork"],
		"hostPID":            pod["hostPID"],
		"dnsPolicy":          pod["dnsPolicy"],
		"priorityClassName":  pod["priorityClassName"],
		"podSecurityContext": pod["securityContext"],
		"tolerations":        sortedJSON(pod["tolerations"]),
		"nodeSelector":       pod["nodeSelector"],
	}
	// Volumes by what they are (names are the manifests' business), and
	// where each is mounted.
	sources := map[string]string{}
	var volumes []string
	for _, v := range asMaps(pod["volumes"]) {
		name := fmt.Sprint(v["name"])
		delete(v, "name")
		sources[name] = canonical(v)
		volumes = append(volumes, canonical(v))
	}
	sort.Strings(volumes)
	w["volumes"] = volumes
	for _, c := range asMaps(pod["containers"]) {
		name := fmt.Sprint(c["name"])
		args := strs(c["args"])
		sort.Strings(args)
		var mounts []string
		for _, m := range asMaps(c["volumeMounts"]) {
			mounts = append(mounts, fmt.Sprintf("%s <- %s readOnly=%v", m["mountPath"], sources[fmt.Sprint(m["name"])], m["readOnly"] == true))
		}
		sort.Strings(mounts)
		w["container "+name+" image"] = c["image"]
		w["container "+name+" command"] = c["command"]
		w["container "+name+" args"] = args
		w["container "+name+" env"] = sortedJSON(c["env"])
		w["container "+name+" ports"] = sortedJSON(c["ports"])
		w["container "+name+" securityContext"] = c["securityContext"]
		w["container "+name+" resources"] = c["resources"]
		w["container "+name+" probes"] = []any{c["livenessProbe"], c["readinessProbe"]}
		w["container "+name+" volumeMounts"] = mounts
	}
	return w
}

func asMaps(v any) []map[string]any {
	list, _ := v.([]any)
	out := make([]map[string]any, 0, len(list))
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
