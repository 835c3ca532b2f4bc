package chart

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestHelmLintStrict: the chart passes `helm lint --strict`, with its
// defaults and with every optional part on.
func TestHelmLintStrict(t *testing.T) {
	helm := helmBin(t)
	run(t, helm, "lint", "--strict", "charts/kubext")
	run(t, helm, "lint", "--strict", "charts/kubext", "--set", allOn)
}

const allOn = "monitoring.serviceMonitor.enabled=true,monitoring.podMonitor.enabled=true," +
	"monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true,webhooks.certificates=certManager"

// TestValuesSchemaRefuses: values.schema.json refuses what would render a
// broken install, with a message naming the value.
func TestValuesSchemaRefuses(t *testing.T) {
	helm := helmBin(t)
	for _, tc := range []struct{ set, says string }{
		{"logging.format=xml", "/logging/format"},
		{"logging.level=trace", "/logging/level"},
		{"typo=1", "typo"},
		{"manager.replicaz=2", "replicaz"},
		{"controllers={ip,dns}", "/controllers/1"},
		{"image.digest=latest", "/image/digest"},
		{"agents.rebootAgent.rebootMethod=halt", "/agents/rebootAgent/rebootMethod"},
		{"agents.rebootAgent.sentinelFile=reboot-required", "/agents/rebootAgent/sentinelFile"},
		{"agents.ipAgent.leaseDuration=2 seconds", "/agents/ipAgent/leaseDuration"},
		{"agents.ipAgent.witnessAllowFrom=the nodes", "/agents/ipAgent/witnessAllowFrom"},
		{"agents.ipAgent.witnessGuard=maybe", "/agents/ipAgent/witnessGuard"},
		{"namePrefix=kubext", "/namePrefix"},
		{"webhooks.certificates=openssl", "/webhooks/certificates"},
		// Not a schema rule: the template refuses a budget no drain can meet.
		{"manager.replicas=1", "must be below manager.replicas"},
	} {
		out, err := tryRun(t, helm, "template", release, "charts/kubext", "--set", tc.set)
		if err == nil {
			t.Errorf("--set %s rendered:\n%.300s", tc.set, out)
			continue
		}
		if !strings.Contains(err.Error(), tc.says) {
			t.Errorf("--set %s refused without naming %s: %v", tc.set, tc.says, err)
		}
	}
}

// The reboot-agent mounts its sentinel's directory: the chart accepts only
// a directory of its own under /run, never one that holds more of the host.
func TestSentinelDirectoryOfItsOwn(t *testing.T) {
	helm := helmBin(t)
	for _, file := range []string{
		"/etc/kubernetes/reboot-required", "/run/k3s/containerd/x", "/run/reboot-required", "/var/run/x",
		"/run/containerd/kubext", "/var/lib/kubelet/reboot", "/home/kubext/reboot", "/run/kubext/../containerd/x",
		"/run/systemd/reboot", "/tmp/kubext/x",
	} {
		if out, err := tryRun(t, helm, "template", release, "charts/kubext", "--set", "agents.rebootAgent.sentinelFile="+file); err == nil {
			t.Errorf("sentinel %s rendered:\n%.300s", file, out)
		} else if !strings.Contains(err.Error(), "a directory of its own") {
			t.Errorf("sentinel %s refused without saying why: %v", file, err)
		}
	}
	for _, file := range []string{"/run/kubext/reboot-required", "/var/run/kubext/x", "/run/reboot-needed/flag"} {
		if out, err := tryRun(t, helm, "template", release, "charts/kubext", "--set", "agents.rebootAgent.sentinelFile="+file); err != nil {
			t.Errorf("sentinel %s refused: %v\n%.300s", file, err, out)
		}
	}
}

// TestValuesReachTheManifests: values other than the defaults end up in the
// pods' args and the objects' names, as their documentation says.
func TestValuesReachTheManifests(t *testing.T) {
	objs := helmTemplate(t, "--set", strings.Join([]string{
		"namePrefix=acme-", "controllers={ip,ippool,reboot}", "logging.level=debug", "logging.format=console",
		"image.digest=sha256:" + strings.Repeat("ab", 32),
		"manager.leaderElection.leaseDuration=30s", "manager.replicas=3",
		"agents.ipAgent.interface=eth1", "agents.ipAgent.leaseDuration=4s", "agents.ipAgent.excludeSNAT=10.0.0.0/8", "agents.ipAgent.witnessAllowFrom=192.0.2.0/24", "agents.ipAgent.witnessGuard=false",
		"agents.rebootAgent.sentinelFile=/run/kubext/reboot", "agents.rebootAgent.rebootMethod=command",
		"agents.rebootAgent.rebootCommand=/bin/true", "monitoring.podMonitor.enabled=true", "rbac.aggregatedRoles=false",
	}, ","))
	byKey := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		byKey[o.GetKind()+"/"+o.GetName()] = o
	}
	image := "ghcr.io/kubext/manager@sha256:" + strings.Repeat("ab", 32)
	check := func(key string, wantArgs ...string) map[string]any {
		o := byKey[key]
		if o == nil {
			t.Fatalf("%s not rendered", key)
		}
		c := asMaps(nested(o.Object, "spec", "template", "spec", "containers"))[0]
		args := strs(c["args"])
		for _, a := range wantArgs {
			if !slices.Contains(args, a) {
				t.Errorf("%s args %v lack %s", key, args, a)
			}
		}
		if c["image"] != image {
			t.Errorf("%s image %v, want %s", key, c["image"], image)
		}
		return c
	}
	check("Deployment/acme-controller-manager", "--controllers=ip,ippool,reboot", "--zap-log-level=debug",
		"--zap-encoder=console", "--leader-elect", "--leader-elect-lease-duration=30s",
		"--webhook-service-name=acme-webhook-service", "--webhook-secret-name=acme-webhook-server-cert",
		"--webhook-configurations=acme-validating-webhook-configuration")
	check("DaemonSet/acme-ip-agent", "--interface=eth1", "--lease-duration=4s", "--metrics-bind-address=:8084", "--witness-guard=false")
	rb := check("DaemonSet/acme-reboot-agent", "--sentinel-file=/host/run/kubext/reboot", "--reboot-method=command",
		"--reboot-command=/bin/true", "--metrics-bind-address=:8085")
	if sc, _ := rb["securityContext"].(map[string]any); sc["privileged"] != true {
		t.Errorf("reboot-agent with --reboot-method=command (nsenter) is not privileged: %v", sc)
	}
	vols := canonical(nested(byKey["DaemonSet/acme-reboot-agent"].Object, "spec", "template", "spec", "volumes"))
	if !strings.Contains(vols, `"path":"/run/kubext"`) {
		t.Errorf("reboot-agent mounts %s, not the sentinel's directory /run/kubext", vols)
	}
	if r := nested(byKey["Deployment/acme-controller-manager"].Object, "spec", "replicas"); canonical(r) != "3" {
		t.Errorf("manager replicas %v, want 3", r)
	}
	if d := nested(byKey["ConfigMap/acme-ip-agent"].Object, "data", "exclude-snat"); d != "10.0.0.0/8" {
		t.Errorf("ip-agent exclude-snat %v", d)
	}
	if d := nested(byKey["ConfigMap/acme-ip-agent"].Object, "data", "witness-allow-from"); d != "192.0.2.0/24" {
		t.Errorf("ip-agent witness-allow-from %v", d)
	}
	if env := canonical(nested(byKey["DaemonSet/acme-ip-agent"].Object, "spec", "template", "spec", "containers")); !strings.Contains(env, `"key":"witness-allow-from"`) {
		t.Errorf("the ip-agent does not read witness-allow-from from its ConfigMap: %s", env)
	}
	// The policies keep matching the renamed accounts, and the bindings
	// name the renamed policies.
	b := byKey["ValidatingAdmissionPolicyBinding/acme-ip-agent-own-node.ip.kubext.io"]
	if b == nil || nested(b.Object, "spec", "policyName") != "acme-ip-agent-own-node.ip.kubext.io" {
		t.Errorf("ip-agent policy binding not renamed with the prefix: %v", b)
	}
	// Only the release's manager orders reboots: the reboot-orders policy
	// exempts its service account, by namespace and name.
	rp := byKey["ValidatingAdmissionPolicy/acme-reboot-orders.reboot.kubext.io"]
	if rp == nil || !strings.Contains(canonical(nested(rp.Object, "spec", "matchConditions")),
		"system:serviceaccount:"+namespace+":acme-controller-manager") {
		t.Errorf("reboot-orders policy does not exempt the release's manager (%s/acme-controller-manager): %v", namespace, rp)
	}
	// and only it writes the release's approvals ledger.
	var lp string
	if o := byKey["ValidatingAdmissionPolicy/acme-reboot-ledger.reboot.kubext.io"]; o != nil {
		lp = canonical(nested(o.Object, "spec", "matchConditions"))
	}
	for _, want := range []string{"'" + namespace + "/acme-reboot-ledger'", "system:serviceaccount:" + namespace + ":acme-controller-manager"} {
		if !strings.Contains(lp, want) {
			t.Errorf("reboot-ledger policy's conditions %s do not name %s", lp, want)
		}
	}
	for key := range byKey {
		if strings.HasSuffix(key, "-editor-role") || strings.HasSuffix(key, "-viewer-role") {
			t.Errorf("rbac.aggregatedRoles=false still renders %s", key)
		}
		if !strings.Contains(key, "/acme-") && !strings.HasPrefix(key, "CustomResourceDefinition/") {
			t.Errorf("%s is not named with the prefix acme-", key)
		}
	}
	if byKey["PodMonitor/acme-agents"] == nil {
		t.Error("monitoring.podMonitor.enabled renders no PodMonitor")
	}
}

// TestWebhooksOffAndCertManager: webhooks.enabled=false drops the webhook
// objects and tells the manager; certificates=certManager mounts the
// Certificate's Secret read-only and asks cert-manager to inject the CA.
func TestWebhooksOffAndCertManager(t *testing.T) {
	for _, o := range helmTemplate(t, "--set", "webhooks.enabled=false") {
		switch o.GetKind() {
		case "ValidatingWebhookConfiguration":
			t.Errorf("webhooks.enabled=false renders %s", o.GetName())
		case "Deployment":
			args := strs(asMaps(nested(o.Object, "spec", "template", "spec", "containers"))[0]["args"])
			if !slices.Contains(args, "--enable-webhooks=false") {
				t.Errorf("webhooks.enabled=false: manager args %v lack --enable-webhooks=false", args)
			}
		}
	}
	var sawCert bool
	for _, o := range helmTemplate(t, "--set", "webhooks.certificates=certManager") {
		switch o.GetKind() {
		case "Certificate":
			sawCert = true
			if dns := canonical(nested(o.Object, "spec", "dnsNames")); !strings.Contains(dns, "kubext-webhook-service.kubext-system.svc") {
				t.Errorf("Certificate dnsNames %s miss the webhook Service", dns)
			}
		case "ValidatingWebhookConfiguration":
			if a := o.GetAnnotations()["cert-manager.io/inject-ca-from"]; a != "kubext-system/kubext-serving-cert" {
				t.Errorf("inject-ca-from = %q", a)
			}
		case "Deployment":
			pod := nested(o.Object, "spec", "template", "spec").(map[string]any)
			if v := canonical(pod["volumes"]); !strings.Contains(v, `"secretName":"kubext-webhook-server-cert-cm"`) {
				t.Errorf("manager volumes %s do not mount the Certificate's Secret", v)
			}
			args := strs(asMaps(pod["containers"])[0]["args"])
			if !slices.Contains(args, "--webhook-cert-source=external") {
				t.Errorf("certManager: manager args %v lack --webhook-cert-source=external", args)
			}
		}
	}
	if !sawCert {
		t.Error("webhooks.certificates=certManager renders no Certificate")
	}
}

// The FlowSchema that gives the manager's leader election its priority
// level names the release's manager and namespace (a FlowSchema naming
// config/default's kubext-system/kubext-controller-manager would match
// nobody, and the manager would fall back to workload-low unnoticed), and
// flowControl.enabled=false renders none.
func TestFlowSchemaNamesTheReleasesManager(t *testing.T) {
	find := func(objs []*unstructured.Unstructured) *unstructured.Unstructured {
		for _, o := range objs {
			if o.GetKind() == "FlowSchema" {
				return o
			}
		}
		return nil
	}
	fs := find(helmTemplate(t, "--namespace", "acme-ops", "--set", "namePrefix=acme-"))
	if fs == nil || fs.GetName() != "acme-leader-election" {
		t.Fatalf("no FlowSchema acme-leader-election rendered: %v", fs)
	}
	want := `[{"resourceRules":[{"apiGroups":["coordination.k8s.io"],"namespaces":["acme-ops"],"resources":["leases"],"verbs":["create","update"]}],` +
		`"subjects":[{"kind":"ServiceAccount","serviceAccount":{"name":"acme-controller-manager","namespace":"acme-ops"}}]}]`
	if got := canonical(nested(fs.Object, "spec", "rules")); got != want {
		t.Errorf("FlowSchema rules\n got %s\nwant %s", got, want)
	}
	if level := nested(fs.Object, "spec", "priorityLevelConfiguration", "name"); level != "leader-election" {
		t.Errorf("FlowSchema priority level %v, want leader-election", level)
	}
	if fs := find(helmTemplate(t, "--set", "flowControl.enabled=false")); fs != nil {
		t.Errorf("flowControl.enabled=false still renders FlowSchema %s", fs.GetName())
	}
}
