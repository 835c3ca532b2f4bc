package manifests

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// controllerRoles are the directories of config/rbac/controllers: the
// manager itself (core) and each controller `--controllers` can select.
var controllerRoles = []string{"core", "crontab", "ip", "ippool", "pulsarconsumer", "reboot", "redis"}

// roleAtoms reads a generated role file (a ClusterRole and maybe a Role,
// both named manager-role) and binds it to the manager's account, so that
// managerAtoms reads it as the manager would hold it.
func roleAtoms(t *testing.T, file string) map[rbacAtom]bool {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	objs := []*unstructured.Unstructured{}
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		o := &unstructured.Unstructured{}
		if err := dec.Decode(&o.Object); err != nil {
			break
		}
		if len(o.Object) == 0 {
			continue
		}
		objs = append(objs, o)
		b := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1",
			"kind":       o.GetKind() + "Binding",
			"metadata":   map[string]any{"name": "b", "namespace": o.GetNamespace()},
			"roleRef":    map[string]any{"kind": o.GetKind(), "name": o.GetName()},
			"subjects":   []any{map[string]any{"kind": "ServiceAccount", "name": "m"}},
		}}
		objs = append(objs, b)
	}
	atoms, _, err := managerAtoms(objs, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(atoms) == 0 {
		t.Fatalf("%s grants nothing", file)
	}
	set := map[rbacAtom]bool{}
	for _, a := range atoms {
		set[a] = true
	}
	return set
}

// The per-controller roles are generated from the same markers as
// role.yaml: together they grant exactly what it grants, so a manager that
// runs every controller holds the same rights either way, and no marker is
// left out of the per-controller files (a controller moved or added without
// its own role fails here).
func TestPerControllerRolesAddUpToTheManagerRole(t *testing.T) {
	union := map[rbacAtom]bool{}
	for _, c := range controllerRoles {
		for a := range roleAtoms(t, filepath.Join(repo(t), "config", "rbac", "controllers", c, "role.yaml")) {
			union[a] = true
		}
	}
	whole := roleAtoms(t, filepath.Join(repo(t), "config", "rbac", "role.yaml"))
	for a := range whole {
		if !union[a] {
			t.Errorf("role.yaml grants %s, which no per-controller role does: run `make manifests`, or give the marker a controller", a)
		}
	}
	for a := range union {
		if !whole[a] {
			t.Errorf("a per-controller role grants %s, which role.yaml does not: run `make manifests`", a)
		}
	}
	dirs, err := os.ReadDir(filepath.Join(repo(t), "config", "rbac", "controllers"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !slices.Contains(controllerRoles, d.Name()) {
			t.Errorf("config/rbac/controllers/%s is not one of %v: add it here and to MANAGER_CONTROLLERS", d.Name(), controllerRoles)
		}
	}
}

// With a subset of controllers the chart binds the manager only what the
// manager itself and those controllers need: the rights of the others
// (nodes patch for reboots, every Secret for Redis, pods delete for static
// IPs...) are not granted at all.
func TestChartGrantsOnlyTheSelectedControllers(t *testing.T) {
	atom := func(group, resource, verb string) rbacAtom { return rbacAtom{group, resource, "", verb} }
	nodesPatch := atom("", "nodes", "patch")
	secretsGet := atom("", "secrets", "get")
	podsDelete := atom("", "pods", "delete")
	cronjobs := atom("batch", "cronjobs", "create")
	statefulsets := atom("apps", "statefulsets", "create")
	evictions := atom("", "pods/eviction", "create")
	ipaddresses := atom("networking.k8s.io", "ipaddresses", "create")
	webhookPools := atom("ip.kubext.io", "ippools", "list")
	for _, tc := range []struct {
		controllers string
		want, not   []rbacAtom
	}{
		{"{crontab}", []rbacAtom{cronjobs, webhookPools}, []rbacAtom{nodesPatch, secretsGet, podsDelete, statefulsets, evictions, ipaddresses}},
		{"{redis}", []rbacAtom{secretsGet, statefulsets}, []rbacAtom{nodesPatch, podsDelete, cronjobs, evictions, ipaddresses}},
		{"{reboot}", []rbacAtom{nodesPatch, evictions}, []rbacAtom{secretsGet, podsDelete, cronjobs, statefulsets, ipaddresses}},
		{"{ip,ippool}", []rbacAtom{podsDelete, ipaddresses}, []rbacAtom{nodesPatch, secretsGet, cronjobs, statefulsets, evictions}},
		{"{all}", []rbacAtom{nodesPatch, secretsGet, podsDelete, cronjobs, statefulsets, evictions, ipaddresses}, nil},
	} {
		t.Run(strings.Trim(tc.controllers, "{}"), func(t *testing.T) {
			objs, err := helmTemplate(t, "controllers="+tc.controllers)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range checkManagerRBAC(objs) {
				t.Error(p)
			}
			atoms, _, err := managerAtoms(objs, "kubext-controller-manager")
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range tc.want {
				if !slices.Contains(atoms, a) {
					t.Errorf("the manager lacks %s", a)
				}
			}
			for _, a := range tc.not {
				if slices.Contains(atoms, a) {
					t.Errorf("the manager holds %s, which no selected controller needs", a)
				}
			}
		})
	}
}

// With rbac.redisSecretNamespaces the manager reads and creates (the
// passwords it generates) Secrets in those namespaces only: the
// ClusterRole grants no Secret, a Role in each listed namespace grants get
// and create, bound to the manager; without the Redis controller there is
// no such Role at all.
func TestChartGrantsRedisSecretsPerNamespace(t *testing.T) {
	secretRoles := func(objs []*unstructured.Unstructured) (clusterWide bool, namespaces []string) {
		for _, o := range objs {
			if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
				continue
			}
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, r := range rules {
				rule := r.(map[string]any)
				res, _, _ := unstructured.NestedStringSlice(rule, "resources")
				names, _, _ := unstructured.NestedStringSlice(rule, "resourceNames")
				if !slices.Contains(res, "secrets") || len(names) > 0 {
					continue
				}
				switch {
				case o.GetKind() == "ClusterRole" && o.GetName() == "kubext-manager-role":
					clusterWide = true
				case o.GetKind() == "Role" && o.GetName() == "kubext-redis-secret-reader":
					if verbs, _, _ := unstructured.NestedStringSlice(rule, "verbs"); !slices.Equal(verbs, []string{"create", "get"}) {
						t.Errorf("Secret Role in %s grants %v, want create and get", o.GetNamespace(), verbs)
					}
					namespaces = append(namespaces, o.GetNamespace())
				}
			}
		}
		return clusterWide, namespaces
	}
	bound := func(objs []*unstructured.Unstructured, ns string) bool {
		return slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool {
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
			return o.GetKind() == "RoleBinding" && o.GetNamespace() == ns && ref == "kubext-redis-secret-reader" &&
				len(subjects) == 1 && subjects[0].(map[string]any)["name"] == "kubext-controller-manager"
		})
	}

	objs, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	if wide, nss := secretRoles(objs); !wide || len(nss) != 0 {
		t.Errorf("defaults: cluster-wide Secret get %v, per-namespace %v; want cluster-wide only", wide, nss)
	}

	objs, err = helmTemplate(t, "rbac.redisSecretNamespaces={team-a,team-b}")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range checkManagerRBAC(objs) {
		t.Error(p)
	}
	wide, nss := secretRoles(objs)
	slices.Sort(nss)
	if wide || !slices.Equal(nss, []string{"team-a", "team-b"}) {
		t.Errorf("redisSecretNamespaces: cluster-wide Secret get %v, per-namespace %v; want none, team-a and team-b", wide, nss)
	}
	for _, ns := range []string{"team-a", "team-b"} {
		if !bound(objs, ns) {
			t.Errorf("no RoleBinding of the manager to the Secret reader in %s", ns)
		}
	}

	objs, err = helmTemplate(t, "rbac.redisSecretNamespaces={team-a}", "controllers={crontab}")
	if err != nil {
		t.Fatal(err)
	}
	if wide, nss := secretRoles(objs); wide || len(nss) != 0 {
		t.Errorf("without the Redis controller: cluster-wide Secret get %v, per-namespace %v; want neither", wide, nss)
	}

	if _, err := helmTemplate(t, "rbac.redisSecretNamespaces={Not_A_Namespace}"); err == nil {
		t.Error("a namespace name the API would refuse was accepted by the values schema")
	}
}
