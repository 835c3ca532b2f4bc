package chart

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/lablock"
)

// lockLabs takes the machine-wide lab lock for the rest of the test.
func lockLabs(t *testing.T) {
	t.Helper()
	t.Logf("waiting for %s", lablock.Path)
	unlock, err := lablock.Lock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
}

// TestHelmInstallUpgradeUninstallOnLab installs the chart into a lab of its
// own (a real API server, kwok running the pods) the way a user does:
// `helm install --wait` into a namespace labelled for Pod Security, an
// `helm upgrade --wait` that changes the manager's args and replicas, and
// `helm uninstall --wait`, after which nothing of the release is left but
// the CRDs (Helm keeps them), which are then removed as docs/helm.md says.
func TestHelmInstallUpgradeUninstallOnLab(t *testing.T) {
	helm := helmBin(t)
	lockLabs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l, err := lab.Up(ctx, lab.Options{Name: "chart", Prefix: "kxch", Nodes: 2,
		Log: func(f string, a ...any) { t.Logf("lab: "+f, a...) }})
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := l.Kubectl(ctx, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	helmRun := func(args ...string) string {
		t.Helper()
		args = append(args, "--kubeconfig", l.Kubeconfig, "--namespace", namespace)
		return string(run(t, helm, args...))
	}

	// The namespace, as docs/helm.md has the user make it.
	kubectl("create", "namespace", namespace)
	kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=privileged",
		"pod-security.kubernetes.io/warn=restricted", "pod-security.kubernetes.io/audit=restricted")

	helmRun("install", release, filepath.Join(root(t), "charts/kubext"), "--wait", "--timeout", "3m")
	rendered := helmTemplate(t)
	for _, o := range rendered {
		if o.GetKind() == "CustomResourceDefinition" {
			kubectl("get", "crd", o.GetName())
			continue
		}
		args := []string{"get", resourceOf(o.GetKind(), o.GetAPIVersion()), o.GetName()}
		if o.GetNamespace() != "" && !clusterScoped[o.GetKind()] {
			args = append(args, "-n", namespace)
		}
		kubectl(args...)
	}
	if got := kubectl("get", "deployment", release+"-controller-manager", "-n", namespace, "-o", "jsonpath={.status.readyReplicas}"); got != "2" {
		t.Errorf("manager ready replicas after install: %q, want 2", got)
	}
	for _, ds := range []string{"ip-agent", "reboot-agent"} {
		if got := kubectl("get", "daemonset", release+"-"+ds, "-n", namespace, "-o", "jsonpath={.status.numberReady}"); got != "2" {
			t.Errorf("%s ready on %q nodes, want 2", ds, got)
		}
	}

	// Upgrade: other values reach the running release.
	helmRun("upgrade", release, filepath.Join(root(t), "charts/kubext"), "--wait", "--timeout", "3m",
		"--set", "manager.replicas=3,logging.level=debug,rbac.aggregatedRoles=false")
	args := kubectl("get", "deployment", release+"-controller-manager", "-n", namespace, "-o", "jsonpath={.spec.template.spec.containers[0].args}")
	if !strings.Contains(args, "--zap-log-level=debug") {
		t.Errorf("manager args after upgrade: %s", args)
	}
	if got := kubectl("get", "deployment", release+"-controller-manager", "-n", namespace, "-o", "jsonpath={.status.readyReplicas}"); got != "3" {
		t.Errorf("manager ready replicas after upgrade: %q, want 3", got)
	}
	if out, err := l.Kubectl(ctx, "get", "clusterrole", release+"-ip-viewer-role"); err == nil {
		t.Errorf("the upgrade to rbac.aggregatedRoles=false left the ip viewer role: %s", out)
	}
	if got := helmRun("history", release, "-o", "json"); !strings.Contains(got, `"revision":2`) {
		t.Errorf("helm history after upgrade: %s", got)
	}

	// Uninstall: nothing of the release is left but the CRDs.
	helmRun("uninstall", release, "--wait", "--timeout", "3m")
	var left []string
	for _, o := range rendered {
		if o.GetKind() == "CustomResourceDefinition" {
			continue
		}
		args := []string{"get", resourceOf(o.GetKind(), o.GetAPIVersion()), o.GetName(), "--ignore-not-found", "-o", "name"}
		if !clusterScoped[o.GetKind()] {
			args = append(args, "-n", namespace)
		}
		if out := strings.TrimSpace(kubectl(args...)); out != "" {
			left = append(left, out)
		}
	}
	// What the workloads made (pods, controller revisions, the leader
	// Lease, Events aside) goes with them; wait for the garbage collector.
	deadline := time.Now().Add(time.Minute)
	for {
		pods := strings.TrimSpace(kubectl("get", "pods,replicasets,controllerrevisions", "-n", namespace, "-o", "name"))
		if pods == "" {
			break
		}
		if time.Now().After(deadline) {
			left = append(left, pods)
			break
		}
		time.Sleep(time.Second)
	}
	if secrets := strings.TrimSpace(kubectl("get", "secrets", "-n", namespace, "-l", "owner=helm", "-o", "name")); secrets != "" {
		left = append(left, secrets)
	}
	if len(left) > 0 {
		t.Errorf("helm uninstall left:\n%s", strings.Join(left, "\n"))
	}
	crds := kubectl("get", "crd", "-o", "name")
	for _, want := range []string{"ips.ip.kubext.io", "rebootgroups.reboot.kubext.io"} {
		if !strings.Contains(crds, want) {
			t.Errorf("helm uninstall removed CRD %s; Helm keeps CRDs (and every custom object)", want)
		}
	}
	// Removing them is the user's explicit step (docs/helm.md).
	kubectl(append([]string{"delete", "--wait", "crd"}, crdNames(t)...)...)
	if crds := kubectl("get", "crd", "-o", "name"); strings.Contains(crds, "kubext.io") || strings.Contains(crds, "stable.example.com") {
		t.Errorf("CRDs left after deleting them: %s", crds)
	}
}

// resourceOf names a kind for kubectl get, with its group when it has
// one (kind.group is unambiguous, e.g. Event, PodMonitor).
func resourceOf(kind, apiVersion string) string {
	group, _, found := strings.Cut(apiVersion, "/")
	if !found {
		return strings.ToLower(kind)
	}
	return strings.ToLower(kind) + "." + group
}

// crdNames are the chart's CRDs, by name.
func crdNames(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, o := range helmTemplate(t) {
		if o.GetKind() == "CustomResourceDefinition" {
			names = append(names, o.GetName())
		}
	}
	if len(names) == 0 {
		t.Fatal(fmt.Errorf("the chart renders no CRD"))
	}
	return names
}
