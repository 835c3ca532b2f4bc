package manifests

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

var components = []string{"ip-agent", "manager", "reboot-agent"}

// report fails the test with each problem, and when a component the
// allowlist covers was not rendered (a check of nothing passes nothing).
func report(t *testing.T, what string, problems, found []string) {
	t.Helper()
	for _, p := range problems {
		t.Errorf("%s: %s", what, p)
	}
	if !slices.Equal(found, components) {
		t.Errorf("%s renders pods of %v, want %v", what, found, components)
	}
}

// `make deploy` (config/default) installs pods that reach on their nodes
// only what the allowlist says.
func TestConfigDefaultPodsStayInTheirAllowlist(t *testing.T) {
	problems, found := checkManifest(configDefault(t), allowances(sentinelDir))
	report(t, "config/default", problems, found)
}

// The chart, with its defaults and with every value that changes a pod,
// installs pods that reach only what the allowlist says; the opt-ins that
// need more (a sentinel elsewhere, the nsenter reboot method) get exactly
// that much more.
func TestChartPodsStayInTheirAllowlist(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sets  []string
		allow func() map[string]*allowance
	}{
		{name: "defaults"},
		{
			name: "every pod option",
			sets: []string{
				"monitoring.podMonitor.enabled=true", "agents.ipAgent.metrics.enabled=true",
				"agents.rebootAgent.metrics.enabled=true", "manager.metrics.enabled=true",
				"webhooks.certificates=certManager", "agents.ipAgent.interface=eth1",
				"manager.priorityClassName=system-cluster-critical", "pullSecrets[0].name=regcred",
				"agents.rebootAgent.nodeSelector.pool=a", "manager.leaderElection.leaseDuration=20s",
			},
			allow: func() map[string]*allowance {
				a := allowances(sentinelDir)
				a["manager"].secret = true // cert-manager's certificate
				return a
			},
		},
		{
			name:  "sentinel elsewhere",
			sets:  []string{"agents.rebootAgent.sentinelFile=/var/run/kubext-reboot/needed"},
			allow: func() map[string]*allowance { return allowances("/var/run/kubext-reboot") },
		},
		{
			name: "reboot through nsenter",
			sets: []string{"agents.rebootAgent.rebootMethod=command"},
			allow: func() map[string]*allowance {
				a := allowances(sentinelDir)
				a["reboot-agent"].privileged = true
				return a
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := helmTemplate(t, tc.sets...)
			if err != nil {
				t.Fatal(err)
			}
			allow := allowances(sentinelDir)
			if tc.allow != nil {
				allow = tc.allow()
			}
			problems, found := checkManifest(objs, allow)
			report(t, "chart "+tc.name, problems, found)
		})
	}
}

// The chart refuses a sentinel whose directory would hand the agent much
// more of the host than the sentinel (the runtime's socket under /run,
// other containers' state, configuration).
func TestChartRefusesBroadSentinelDirectories(t *testing.T) {
	for _, f := range []string{
		"/var/run/reboot-required", "/run/reboot-required", "/etc/reboot-required", "/var/lib/kubelet/reboot",
		"/run/containerd/reboot", "/tmp/reboot-required", "/var/run/../run/reboot-required", "run/kubext/reboot-required",
	} {
		if _, err := helmTemplate(t, "agents.rebootAgent.sentinelFile="+f); err == nil {
			t.Errorf("the chart renders with sentinelFile %s", f)
		} else if !strings.Contains(err.Error(), "sentinelFile") {
			t.Errorf("sentinelFile %s refused without saying why: %v", f, err)
		}
	}
}

// The allowlist check finds each way a pod could reach more: it is run on
// config/default with one change at a time, and must report that change.
func TestAllowlistCatchesEscalations(t *testing.T) {
	base := configDefault(t)
	if problems, _ := checkManifest(base, allowances(sentinelDir)); len(problems) > 0 {
		t.Fatalf("config/default itself: %v", problems)
	}
	container := func(spec map[string]any) map[string]any { return spec["containers"].([]any)[0].(map[string]any) }
	security := func(spec map[string]any) map[string]any {
		c := container(spec)
		if c["securityContext"] == nil {
			c["securityContext"] = map[string]any{}
		}
		return c["securityContext"].(map[string]any)
	}
	for _, tc := range []struct {
		name, component, want string
		change                func(spec map[string]any)
	}{
		{"the host's /var/run", "reboot-agent", "hostPath /var/run is not allowed", func(s map[string]any) {
			s["volumes"] = append(s["volumes"].([]any), map[string]any{"name": "run", "hostPath": map[string]any{"path": "/var/run"}})
			c := container(s)
			c["volumeMounts"] = append(c["volumeMounts"].([]any), map[string]any{"name": "run", "mountPath": "/run", "readOnly": true})
		}},
		{"the sentinel writable", "reboot-agent", "mounted writable", func(s map[string]any) {
			delete(container(s)["volumeMounts"].([]any)[0].(map[string]any), "readOnly")
		}},
		{"the sentinel with propagation", "reboot-agent", "mountPropagation is not allowed", func(s map[string]any) {
			container(s)["volumeMounts"].([]any)[0].(map[string]any)["mountPropagation"] = "HostToContainer"
		}},
		{"the sentinel outside the mount", "reboot-agent", "--sentinel-file=/host/etc/x is not under", func(s map[string]any) {
			c := container(s)
			c["args"] = append(c["args"].([]any), "--sentinel-file=/host/etc/x")
		}},
		{"SYS_ADMIN", "reboot-agent", "capabilities.add is [KILL SYS_ADMIN]", func(s map[string]any) {
			caps := security(s)["capabilities"].(map[string]any)
			caps["add"] = append(caps["add"].([]any), "SYS_ADMIN")
		}},
		{"capabilities kept", "ip-agent", "capabilities.drop must be [ALL]", func(s map[string]any) {
			delete(security(s)["capabilities"].(map[string]any), "drop")
		}},
		{"seccomp off for the container", "reboot-agent", "seccompProfile must be RuntimeDefault", func(s map[string]any) {
			security(s)["seccompProfile"] = map[string]any{"type": "Unconfined"}
		}},
		{"no seccomp", "ip-agent", "seccompProfile must be RuntimeDefault", func(s map[string]any) {
			delete(s, "securityContext")
		}},
		{"the host's PIDs", "ip-agent", "hostPID: true is not allowed", func(s map[string]any) { s["hostPID"] = true }},
		{"the host's network", "reboot-agent", "hostNetwork: true is not allowed", func(s map[string]any) { s["hostNetwork"] = true }},
		{"the host's IPC", "ip-agent", "field hostIPC is not allowed", func(s map[string]any) { s["hostIPC"] = true }},
		{"the host's users", "manager", "field hostUsers is not allowed", func(s map[string]any) { s["hostUsers"] = true }},
		{"an init container", "manager", "field initContainers is not allowed", func(s map[string]any) {
			s["initContainers"] = []any{map[string]any{"name": "x", "image": "busybox"}}
		}},
		{"root's group for the reboot-agent", "reboot-agent", "with group 0", func(s map[string]any) { delete(security(s), "runAsGroup") }},
		{"group 0 for the reboot-agent", "reboot-agent", "with group 0", func(s map[string]any) { security(s)["runAsGroup"] = int64(0) }},
		{"root manager", "manager", "may run as root", func(s map[string]any) { security(s)["runAsUser"] = int64(0) }},
		{"manager without runAsNonRoot", "manager", "may run as root", func(s map[string]any) {
			delete(s["securityContext"].(map[string]any), "runAsNonRoot")
		}},
		{"privileged", "manager", "privileged is not allowed", func(s map[string]any) { security(s)["privileged"] = true }},
		{"privilege escalation", "manager", "allowPrivilegeEscalation must be false", func(s map[string]any) {
			delete(security(s), "allowPrivilegeEscalation")
		}},
		{"writable root", "ip-agent", "readOnlyRootFilesystem must be true", func(s map[string]any) {
			security(s)["readOnlyRootFilesystem"] = false
		}},
		{"a /proc mount type", "reboot-agent", "field procMount is not allowed", func(s map[string]any) {
			security(s)["procMount"] = "Unmasked"
		}},
		{"a host path for the manager", "manager", "hostPath /var/lib/kubelet is not allowed", func(s map[string]any) {
			s["volumes"] = append(s["volumes"].([]any), map[string]any{"name": "k", "hostPath": map[string]any{"path": "/var/lib/kubelet"}})
		}},
		{"a secret volume for an agent", "reboot-agent", "volume s: this kind of volume is not allowed", func(s map[string]any) {
			s["volumes"] = []any{map[string]any{"name": "s", "secret": map[string]any{"secretName": "x"}}}
		}},
		{"a host port", "manager", "hostPort 80 is not allowed", func(s map[string]any) {
			c := container(s)
			c["ports"] = append(c["ports"].([]any), map[string]any{"containerPort": int64(80), "hostPort": int64(80)})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := make([]*unstructured.Unstructured, 0, len(base))
			changed := false
			for _, o := range base {
				o = o.DeepCopy()
				if labels, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels"); labels["app.kubernetes.io/component"] == tc.component {
					spec, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "template", "spec")
					tc.change(spec.(map[string]any))
					changed = true
				}
				objs = append(objs, o)
			}
			if !changed {
				t.Fatalf("no %s in config/default", tc.component)
			}
			problems, _ := checkManifest(objs, allowances(sentinelDir))
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("not reported (want %q); reported: %q", tc.want, problems)
			}
		})
	}
	t.Run("a workload of no known component", func(t *testing.T) {
		extra := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": map[string]any{"name": "debug"},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{}}}},
		}}
		problems, _ := checkManifest(append(slices.Clone(base), extra), allowances(sentinelDir))
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, "DaemonSet/debug: runs a pod of no known component") }) {
			t.Errorf("not reported: %q", problems)
		}
	})
}
