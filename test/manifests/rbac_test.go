package manifests

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// grant is one permission the manager may hold, and why: the controller
// (and +kubebuilder:rbac marker) that needs it.
type grant struct {
	group, resource, name string // name "" = any object of the resource
	verbs                 []string
	why                   string
}

// managerGrants is everything the manager's service account may be
// granted, by any Role or ClusterRole bound to it. A permission not listed
// here fails TestManagerRBACStaysInItsAllowlist: add it with its reason, in
// review, or do without it.
var managerGrants = []grant{
	// Leader election (config/rbac/leader_election_role.yaml), in the
	// manager's namespace.
	{"coordination.k8s.io", "leases", "", []string{"get", "list", "watch", "create", "update", "patch", "delete"}, "leader election Lease (namespaced Role); agents' heartbeats (read)"},
	{"", "events", "", []string{"create", "patch"}, "leader election events (namespaced Role)"},
	{"events.k8s.io", "events", "", []string{"create", "patch"}, "Events of every controller"},
	// Reboot.
	{"", "nodes", "", []string{"get", "list", "watch"}, "reboot and ip controllers read nodes"},
	{"", "nodes", "", []string{"patch"}, "reboot controller: its protocol annotations and the cordon (config/policy/reboot-order.yaml keeps the orders its own)"},
	{"", "pods/eviction", "", []string{"create"}, "reboot controller: drains through the Eviction API"},
	{"apps", "daemonsets", "", []string{"get"}, "reboot controller: drain skips DaemonSet pods"},
	{"policy", "poddisruptionbudgets", "", []string{"list"}, "reboot controller: names the budget that blocks a drain"},
	{"reboot.kubext.io", "rebootgroups", "", []string{"get", "list", "watch"}, "reboot controller"},
	{"reboot.kubext.io", "rebootgroups/status", "", []string{"get", "patch"}, "reboot controller"},
	{"", "configmaps", "kubext-reboot-ledger", []string{"get", "list", "watch", "update"}, "reboot controller: the approvals ledger, by name (list and watch with a metadata.name field selector: its cache)"},
	{"", "configmaps", "", []string{"create"}, "reboot controller: creates the ledger (create cannot be limited to a name; namespaced Role)"},
	// Static IPs.
	{"", "pods", "", []string{"get", "list", "watch"}, "ip controller (holders), redis (members), reboot drain"},
	{"", "pods", "", []string{"delete"}, "ip controller: --ip-delete-stale-pods"},
	{"", "pods", "", []string{"patch"}, "redis controller: member role labels"},
	{"", "namespaces", "", []string{"get", "list", "watch"}, "ip controller: claimants' namespace selectors"},
	{"networking.k8s.io", "servicecidrs", "", []string{"get", "list", "watch"}, "ip controller: conflicts with Service CIDRs"},
	{"networking.k8s.io", "ipaddresses", "", []string{"get", "list", "watch", "create", "delete", "patch"}, "ip controller: reserves addresses in the Service IP allocator"},
	{"ip.kubext.io", "ips", "", []string{"get", "list", "watch", "patch"}, "ip controller"},
	{"ip.kubext.io", "ips/status", "", []string{"get", "patch"}, "ip controller"},
	{"ip.kubext.io", "ips/finalizers", "", []string{"update"}, "ip controller"},
	{"ip.kubext.io", "ippools", "", []string{"get", "list", "watch", "patch"}, "ippool controller"},
	{"ip.kubext.io", "ippools/status", "", []string{"get", "patch"}, "ippool controller"},
	{"ip.kubext.io", "ippools/finalizers", "", []string{"update"}, "ippool controller"},
	// Applications.
	{"apps", "deployments", "", []string{"get", "list", "watch", "create", "patch"}, "pulsarconsumer controller: owned Deployments"},
	{"apps", "statefulsets", "", []string{"get", "list", "watch", "create", "patch"}, "redis controller: owned StatefulSets"},
	{"", "services", "", []string{"get", "list", "watch", "create", "patch"}, "redis controller: owned Services"},
	{"policy", "poddisruptionbudgets", "", []string{"get", "watch", "create", "patch"}, "redis controller: owned PodDisruptionBudgets"},
	{"", "secrets", "", []string{"get"}, "redis controller: the password Secret a Redis references"},
	{"batch", "cronjobs", "", []string{"get", "list", "watch", "create", "patch"}, "crontab controller: owned CronJobs"},
	{"pulsar.kubext.io", "pulsarconsumers", "", []string{"get", "list", "watch"}, "pulsarconsumer controller"},
	{"pulsar.kubext.io", "pulsarconsumers/status", "", []string{"get", "patch"}, "pulsarconsumer controller"},
	{"pulsar.kubext.io", "pulsarconsumers/finalizers", "", []string{"update"}, "pulsarconsumer controller"},
	{"cache.kubext.io", "redis", "", []string{"get", "list", "watch"}, "redis controller"},
	{"cache.kubext.io", "redis/status", "", []string{"get", "patch"}, "redis controller"},
	{"cache.kubext.io", "redis/finalizers", "", []string{"update"}, "redis controller"},
	{"stable.example.com", "crontabs", "", []string{"get", "list", "watch"}, "crontab controller"},
	{"stable.example.com", "crontabs/status", "", []string{"get", "patch"}, "crontab controller"},
	{"stable.example.com", "crontabs/finalizers", "", []string{"update"}, "crontab controller"},
	// Webhooks and metrics.
	{"", "secrets", "", []string{"create"}, "webhook certificates: creates their Secret (namespaced Role)"},
	{"", "secrets", "kubext-webhook-server-cert", []string{"get", "patch"}, "webhook certificates: its own Secret, by name"},
	{"admissionregistration.k8s.io", "validatingwebhookconfigurations", "kubext-validating-webhook-configuration", []string{"get", "patch"}, "webhook certificates: injects its CA, by name"},
	{"authentication.k8s.io", "tokenreviews", "", []string{"create"}, "secure metrics: authenticates scrapers"},
	{"authorization.k8s.io", "subjectaccessreviews", "", []string{"create"}, "secure metrics: authorizes scrapers"},
}

// rbacAtom is one permission: a verb on a resource (or an object of it).
type rbacAtom struct{ group, resource, name, verb string }

func (a rbacAtom) String() string {
	name := a.name
	if name == "" {
		name = "*"
	}
	return fmt.Sprintf("%s %q %s/%s", a.verb, a.group, a.resource, name)
}

// managerAtoms lists what every Role and ClusterRole bound to the manager's
// service account grants, and the rules that use a wildcard.
func managerAtoms(objs []*unstructured.Unstructured, account string) (atoms []rbacAtom, wildcards []string, err error) {
	roles := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetKind() == "Role" || o.GetKind() == "ClusterRole" {
			roles[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = o
		}
	}
	for _, o := range objs {
		if o.GetKind() != "RoleBinding" && o.GetKind() != "ClusterRoleBinding" {
			continue
		}
		var b rbacv1.RoleBinding // a ClusterRoleBinding has the same fields
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
			return nil, nil, err
		}
		if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool { return s.Kind == "ServiceAccount" && s.Name == account }) {
			continue
		}
		ns := ""
		if b.RoleRef.Kind == "Role" {
			ns = o.GetNamespace()
		}
		role := roles[b.RoleRef.Kind+"/"+ns+"/"+b.RoleRef.Name]
		if role == nil {
			return nil, nil, fmt.Errorf("%s %s binds %s %s, which the manifest does not hold", o.GetKind(), o.GetName(), b.RoleRef.Kind, b.RoleRef.Name)
		}
		var r rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(role.Object, &r); err != nil {
			return nil, nil, err
		}
		if r.AggregationRule != nil {
			wildcards = append(wildcards, role.GetName()+": aggregated (grants whatever other roles add)")
		}
		for _, rule := range r.Rules {
			all := append(append(append(slices.Clone(rule.APIGroups), rule.Resources...), rule.Verbs...), rule.ResourceNames...)
			if slices.ContainsFunc(all, func(s string) bool { return strings.Contains(s, "*") }) {
				wildcards = append(wildcards, fmt.Sprintf("%s: %v", role.GetName(), rule))
			}
			for _, u := range rule.NonResourceURLs {
				for _, v := range rule.Verbs {
					atoms = append(atoms, rbacAtom{"url", u, "", v})
				}
			}
			names := rule.ResourceNames
			if len(names) == 0 {
				names = []string{""}
			}
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, n := range names {
						for _, v := range rule.Verbs {
							atoms = append(atoms, rbacAtom{g, res, n, v})
						}
					}
				}
			}
		}
	}
	return atoms, wildcards, nil
}

// allowed says whether a grant covers the atom (a grant by name covers only
// that object; a grant of any object covers it too).
func allowed(a rbacAtom) bool {
	return slices.ContainsFunc(managerGrants, func(g grant) bool {
		return g.group == a.group && g.resource == a.resource && (g.name == "" || g.name == a.name) && slices.Contains(g.verbs, a.verb)
	})
}

func checkManagerRBAC(objs []*unstructured.Unstructured) []string {
	atoms, wildcards, err := managerAtoms(objs, "kubext-controller-manager")
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, w := range wildcards {
		out = append(out, "wildcard: "+w)
	}
	if len(atoms) == 0 {
		out = append(out, "no permission bound to kubext-controller-manager: the check checks nothing")
	}
	for _, a := range atoms {
		if !allowed(a) {
			out = append(out, "not in the allowlist (test/manifests/rbac_test.go): "+a.String())
		}
	}
	return out
}

// The manager's service account holds no wildcard and nothing beyond
// managerGrants, in config/default and in the chart.
func TestManagerRBACStaysInItsAllowlist(t *testing.T) {
	chart, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	for what, objs := range map[string][]*unstructured.Unstructured{
		"config/default": configDefault(t),
		"chart":          chart,
	} {
		for _, p := range checkManagerRBAC(objs) {
			t.Errorf("%s: %s", what, p)
		}
	}
}

// The check reports a wildcard and a permission nobody listed.
func TestManagerRBACCheckCatchesMore(t *testing.T) {
	base := configDefault(t)
	for _, tc := range []struct {
		name, want string
		rule       map[string]any
	}{
		{"every secret listed", `not in the allowlist (test/manifests/rbac_test.go): list "" secrets/*`,
			map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "verbs": []any{"list"}}},
		{"a wildcard verb", "wildcard: kubext-manager-role",
			map[string]any{"apiGroups": []any{"apps"}, "resources": []any{"deployments"}, "verbs": []any{"*"}}},
		{"another named object", `not in the allowlist (test/manifests/rbac_test.go): patch "" configmaps/kube-proxy`,
			map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "resourceNames": []any{"kube-proxy"}, "verbs": []any{"patch"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := make([]*unstructured.Unstructured, 0, len(base))
			for _, o := range base {
				o = o.DeepCopy()
				if o.GetKind() == "ClusterRole" && o.GetName() == "kubext-manager-role" {
					rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
					_ = unstructured.SetNestedSlice(o.Object, append(rules, tc.rule), "rules")
				}
				objs = append(objs, o)
			}
			if got := checkManagerRBAC(objs); !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("not reported (want %q): %q", tc.want, got)
			}
		})
	}
}
