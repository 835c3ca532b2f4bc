package lab

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestExpandVars(t *testing.T) {
	vars := map[string]string{"POD_NAMESPACE": "kubext-system", "EMPTY": ""}
	for in, want := range map[string]string{
		"--heartbeat-namespace=$(POD_NAMESPACE)": "--heartbeat-namespace=kubext-system",
		"$(UNKNOWN)/x":                           "$(UNKNOWN)/x",
		"$$(POD_NAMESPACE)":                      "$(POD_NAMESPACE)",
		"a$(EMPTY)b":                             "ab",
		"cost $5":                                "cost $5",
		"open $(POD_NAMESPACE":                   "open $(POD_NAMESPACE",
		"$":                                      "$",
	} {
		if got := expandVars(in, vars); got != want {
			t.Errorf("expandVars(%q) = %q, want %q", in, got, want)
		}
	}
}

// The lab runs kubext's own binaries only, from their absolute path in
// the image, and refuses what it cannot run faithfully.
func TestContainerSpecRefuses(t *testing.T) {
	bin := t.TempDir()
	// A file that is no ELF binary: refused before anything else is read.
	if err := os.WriteFile(filepath.Join(bin, "manager"), []byte("#!/bin/sh\n"+strings.Repeat("# not an ELF binary\n", 8)), 0o755); err != nil {
		t.Fatal(err)
	}
	d := &Deployed{lab: &Lab{BinDir: bin, Dir: t.TempDir()}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "kubext-system"}}
	r := &podRun{dir: t.TempDir()}
	cs := fake.NewClientset()
	for name, tc := range map[string]struct {
		c    corev1.Container
		want string
	}{
		"no command":      {corev1.Container{Name: "a"}, "no command"},
		"a shell":         {corev1.Container{Name: "a", Command: []string{"/bin/sh", "-c", "id"}}, "not one of kubext's binaries"},
		"relative path":   {corev1.Container{Name: "a", Command: []string{"manager"}}, "not one of kubext's binaries"},
		"other directory": {corev1.Container{Name: "a", Command: []string{"/usr/bin/manager"}}, "not one of kubext's binaries"},
		"not an ELF":      {corev1.Container{Name: "a", Command: []string{"/manager"}}, "bad magic"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := d.containerSpec(context.Background(), cs, pod, &tc.c, r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// Env as a kubelet computes it: fieldRefs, ConfigMap keys, earlier
// variables expanded in later values, a missing key refused.
func TestResolveEnv(t *testing.T) {
	cs := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "ip-agent", Namespace: "kubext-system"},
		Data:       map[string]string{"exclude-snat": "10.244.0.0/16"},
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-x", Namespace: "kubext-system"},
		Spec:       corev1.PodSpec{NodeName: "node-1"},
	}
	c := &corev1.Container{Env: []corev1.EnvVar{
		{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "EXCLUDE_SNAT", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "ip-agent"}, Key: "exclude-snat"}}},
		{Name: "WHERE", Value: "$(NODE_NAME)/$(LATER)"},
		{Name: "LATER", Value: "x"},
	}}
	env, err := resolveEnv(context.Background(), cs, pod, c)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"NODE_NAME=node-1", "EXCLUDE_SNAT=10.244.0.0/16", "WHERE=node-1/$(LATER)", "LATER=x"}
	if strings.Join(env, " ") != strings.Join(want, " ") {
		t.Fatalf("env = %q, want %q", env, want)
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: "MISSING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "ip-agent"}, Key: "nope"}}})
	if _, err := resolveEnv(context.Background(), cs, pod, c); err == nil || !strings.Contains(err.Error(), "no key nope") {
		t.Fatalf("a missing ConfigMap key: got %v", err)
	}
}

func TestHostPathOnlyVarRun(t *testing.T) {
	l := &Lab{Dir: t.TempDir()}
	if got, err := l.hostPath("node-0", "/var/run"); err != nil || got != l.NodeDir("node-0") {
		t.Fatalf("/var/run: %q, %v", got, err)
	}
	if got, err := l.hostPath("node-0", "/run/kubext"); err != nil || got != l.SentinelDir("node-0") {
		t.Fatalf("/run/kubext: %q, %v", got, err)
	}
	if _, err := l.hostPath("node-0", "/etc"); err == nil {
		t.Fatal("/etc of the machine was handed to a pod")
	}
}
