package manifests

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// allowance is what one component's pods may have.
type allowance struct {
	// kind is the workload that runs the component.
	kind string
	// hostNetwork and hostPID: the host namespaces the pod may join.
	// hostIPC, hostUsers: false and shareProcessNamespace are never
	// allowed.
	hostNetwork, hostPID bool
	// root: the container may run as UID 0 (the agents: capabilities
	// reach only root's processes without file capabilities). Otherwise
	// runAsNonRoot must hold and runAsUser may not be 0.
	root bool
	// capabilities are the ones added after drop ALL, all of them.
	capabilities []string
	// hostPaths are the host directories the pod may mount, each
	// read-only, by path, with the hostPath types allowed.
	hostPaths map[string][]corev1.HostPathType
	// emptyDir and secret volumes the pod may have (the manager's webhook
	// certificate: an in-memory emptyDir, or cert-manager's Secret).
	emptyDir, secret bool
	// privileged allows a privileged container: only the reboot-agent's
	// opt-in --reboot-method=command (nsenter into the host).
	privileged bool
	// fileArgs are flags whose value is a host file seen through a
	// hostPath mount: the value must lie under that mount.
	fileArgs []string
}

// sentinelDir is the reboot-agent's one host directory by default.
const sentinelDir = "/run/kubext"

// allowances is the allowlist by app.kubernetes.io/component, for the
// sentinel directory dir.
func allowances(dir string) map[string]*allowance {
	return map[string]*allowance{
		"manager": {
			kind:     "Deployment",
			emptyDir: true,
		},
		"ip-agent": {
			kind:         "DaemonSet",
			hostNetwork:  true,
			root:         true,
			capabilities: []string{"NET_ADMIN", "NET_RAW"},
			// The witness key (Secret kubext-witness-key).
			secret: true,
		},
		"reboot-agent": {
			kind:         "DaemonSet",
			hostPID:      true,
			root:         true,
			capabilities: []string{"KILL"},
			hostPaths: map[string][]corev1.HostPathType{
				dir: {corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory},
			},
			fileArgs: []string{"--sentinel-file"},
		},
	}
}

// Fields a pod spec and its containers may use: anything else (hostIPC,
// shareProcessNamespace, hostUsers, initContainers, ephemeralContainers,
// runtimeClassName, the deprecated serviceAccount alias, hostAliases, ...)
// is reported.
var (
	podFields = []string{
		"affinity", "containers", "dnsPolicy", "hostNetwork", "hostPID", "imagePullSecrets", "nodeSelector",
		"priorityClassName", "securityContext", "serviceAccountName", "terminationGracePeriodSeconds",
		"tolerations", "topologySpreadConstraints", "volumes",
	}
	containerFields = []string{
		"args", "command", "env", "image", "imagePullPolicy", "livenessProbe", "name", "ports",
		"readinessProbe", "resources", "securityContext", "volumeMounts",
	}
	podSecurityFields       = []string{"runAsNonRoot", "seccompProfile"}
	containerSecurityFields = []string{
		"allowPrivilegeEscalation", "capabilities", "privileged", "readOnlyRootFilesystem", "runAsNonRoot",
		"runAsGroup", "runAsUser", "seccompProfile",
	}
	mountFields = []string{"mountPath", "name", "readOnly"}
)

// podKinds are the kinds that carry a pod template (or are pods): every
// one of them in a manifest is checked, and one of a kind no component runs
// as is reported.
var podKinds = map[string][]string{
	"Deployment":  {"spec", "template"},
	"DaemonSet":   {"spec", "template"},
	"StatefulSet": {"spec", "template"},
	"ReplicaSet":  {"spec", "template"},
	"Job":         {"spec", "template"},
	"CronJob":     {"spec", "jobTemplate", "spec", "template"},
	"Pod":         nil,
}

// checkManifest checks every pod of a rendered manifest against allow and
// returns the problems, and the components it found.
func checkManifest(objs []*unstructured.Unstructured, allow map[string]*allowance) (problems []string, found []string) {
	for _, o := range objs {
		fields, ok := podKinds[o.GetKind()]
		if !ok {
			continue
		}
		key := o.GetKind() + "/" + o.GetName()
		tmpl := o.Object
		if fields != nil {
			m, ok, err := unstructured.NestedMap(o.Object, fields...)
			if !ok || err != nil {
				problems = append(problems, key+": no pod template")
				continue
			}
			tmpl = m
		}
		labels, _, _ := unstructured.NestedStringMap(tmpl, "metadata", "labels")
		component := labels["app.kubernetes.io/component"]
		a, ok := allow[component]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: runs a pod of no known component (%q): add it to the allowlist, deliberately", key, component))
			continue
		}
		if o.GetKind() != a.kind {
			problems = append(problems, fmt.Sprintf("%s: component %s runs as a %s", key, component, a.kind))
		}
		found = append(found, component)
		for _, p := range checkPod(tmpl, a) {
			problems = append(problems, key+": "+p)
		}
	}
	sort.Strings(found)
	return problems, slices.Compact(found)
}

// checkPod checks one pod template (or pod) as an unstructured map: first
// the fields it uses, then what they say.
func checkPod(tmpl map[string]any, a *allowance) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	raw, _, _ := unstructured.NestedMap(tmpl, "spec")
	out = append(out, unknownFields("spec", raw, podFields)...)
	if sc, ok := raw["securityContext"].(map[string]any); ok {
		out = append(out, unknownFields("spec.securityContext", sc, podSecurityFields)...)
	}
	for i, c := range asMaps(raw["containers"]) {
		where := fmt.Sprintf("container %d", i)
		out = append(out, unknownFields(where, c, containerFields)...)
		if sc, ok := c["securityContext"].(map[string]any); ok {
			out = append(out, unknownFields(where+" securityContext", sc, containerSecurityFields)...)
		}
		for _, m := range asMaps(c["volumeMounts"]) {
			out = append(out, unknownFields(where+" volumeMount", m, mountFields)...)
		}
	}

	var spec corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &spec); err != nil {
		return append(out, "pod spec: "+err.Error())
	}
	if spec.HostNetwork && !a.hostNetwork {
		bad("hostNetwork: true is not allowed")
	}
	if spec.HostPID && !a.hostPID {
		bad("hostPID: true is not allowed")
	}
	psc := ptr.Deref(spec.SecurityContext, corev1.PodSecurityContext{})

	hostPathOf := map[string]string{}
	for _, v := range spec.Volumes {
		switch {
		case v.HostPath != nil:
			types, ok := a.hostPaths[path.Clean(v.HostPath.Path)]
			if !ok {
				bad("volume %s: hostPath %s is not allowed (allowed: %v)", v.Name, v.HostPath.Path, keys(a.hostPaths))
				continue
			}
			if !slices.Contains(types, ptr.Deref(v.HostPath.Type, corev1.HostPathUnset)) {
				bad("volume %s: hostPath type %q, allowed %q", v.Name, ptr.Deref(v.HostPath.Type, ""), types)
			}
			hostPathOf[v.Name] = v.HostPath.Path
		case v.EmptyDir != nil && a.emptyDir:
		case v.Secret != nil && a.secret:
		default:
			bad("volume %s: this kind of volume is not allowed", v.Name)
		}
	}

	if len(spec.Containers) == 0 {
		bad("no containers")
	}
	for _, c := range spec.Containers {
		out = append(out, checkContainer(c, psc, a, hostPathOf)...)
	}
	return out
}

// checkContainer checks the container's effective security settings (the
// container's own, else the pod's) and its mounts.
func checkContainer(c corev1.Container, psc corev1.PodSecurityContext, a *allowance, hostPathOf map[string]string) []string {
	var out []string
	bad := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("container %s: ", c.Name)+fmt.Sprintf(format, args...))
	}
	sc := ptr.Deref(c.SecurityContext, corev1.SecurityContext{})

	seccomp := psc.SeccompProfile
	if sc.SeccompProfile != nil {
		seccomp = sc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		bad("seccompProfile must be RuntimeDefault, is %v", seccomp)
	}
	privileged := ptr.Deref(sc.Privileged, false)
	if privileged && !a.privileged {
		bad("privileged is not allowed")
	}
	if !privileged {
		// A privileged container has every capability and a writable
		// host view anyway; the opt-in is checked for what it may mount.
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			bad("allowPrivilegeEscalation must be false")
		}
		if !ptr.Deref(sc.ReadOnlyRootFilesystem, false) {
			bad("readOnlyRootFilesystem must be true")
		}
		var drop, add []string
		if sc.Capabilities != nil {
			for _, d := range sc.Capabilities.Drop {
				drop = append(drop, string(d))
			}
			for _, d := range sc.Capabilities.Add {
				add = append(add, strings.TrimPrefix(string(d), "CAP_"))
			}
		}
		if !slices.Equal(drop, []string{"ALL"}) {
			bad("capabilities.drop must be [ALL], is %v", drop)
		}
		sort.Strings(add)
		if want := slices.Sorted(slices.Values(a.capabilities)); !slices.Equal(add, want) {
			bad("capabilities.add is %v, allowed exactly %v", add, want)
		}
	}
	nonRoot := ptr.Deref(sc.RunAsNonRoot, ptr.Deref(psc.RunAsNonRoot, false))
	user := sc.RunAsUser
	if user == nil {
		user = psc.RunAsUser
	}
	runsAsRoot := !nonRoot || (user != nil && *user == 0)
	if runsAsRoot && !a.root {
		bad("may run as root (runAsNonRoot %v, runAsUser %v)", nonRoot, ptr.Deref(user, -1))
	}
	group := sc.RunAsGroup
	if group == nil {
		group = psc.RunAsGroup
	}
	// The kernel lets a process read another's environment, memory and
	// /proc/PID/root when their user and group IDs match and the target
	// holds no capability the reader lacks: a root container with every
	// capability dropped, for one. In the host's PID namespace, root must
	// not also be root's group.
	if runsAsRoot && a.hostPID && !privileged && ptr.Deref(group, 0) == 0 {
		bad("runs as root in the host's PID namespace with group 0 (runAsGroup %v): it could read root containers' /proc", ptr.Deref(group, -1))
	}
	for _, p := range c.Ports {
		if p.HostPort != 0 && !a.hostNetwork {
			bad("hostPort %d is not allowed", p.HostPort)
		}
	}

	mountOf := map[string]string{}
	for _, m := range c.VolumeMounts {
		host, ok := hostPathOf[m.Name]
		if !ok {
			continue
		}
		if !m.ReadOnly {
			bad("hostPath %s is mounted writable", host)
		}
		mountOf[host] = m.MountPath
	}
	for _, flag := range a.fileArgs {
		v, ok := flagValue(append(slices.Clone(c.Command), c.Args...), flag)
		if !ok {
			bad("%s is not set", flag)
			continue
		}
		under := false
		for _, mp := range mountOf {
			if strings.HasPrefix(path.Clean(v), path.Clean(mp)+"/") {
				under = true
			}
		}
		if !under {
			bad("%s=%s is not under a host directory it mounts (%v)", flag, v, mountOf)
		}
	}
	return out
}

// flagValue finds --flag=value or --flag value; the last one, as the flag
// package keeps the last.
func flagValue(args []string, flag string) (value string, found bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			value, found = v, true
		}
		if a == flag && i+1 < len(args) {
			value, found = args[i+1], true
		}
	}
	return value, found
}

func unknownFields(where string, m map[string]any, allowed []string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(allowed, k) {
			out = append(out, fmt.Sprintf("%s: field %s is not allowed", where, k))
		}
	}
	return out
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func asMaps(v any) []map[string]any {
	list, _ := v.([]any)
	var out []map[string]any
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
