package rebootgate

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

func pod(ns, name string, labels map[string]string, owner string, phase corev1.PodPhase, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Status: corev1.PodStatus{Phase: phase}}
	if owner != "" {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs-" + owner, UID: types.UID(owner), Controller: ptr.To(true)}}
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return p
}

// pdb is a budget its controller last observed at generation 1.
func pdb(ns, name string, allowed int32, generation int64) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: generation},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed, ObservedGeneration: 1}}
}

func ns(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func TestCheck(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	db := map[string]string{"app": "db"}
	watched := &metav1.LabelSelector{MatchLabels: map[string]string{"watch": "yes"}}
	last := &rebootv1.DrainRecord{Node: "n1", Workloads: []rebootv1.WorkloadRef{{Namespace: "a", Kind: "ReplicaSet", Name: "rs-w", UID: "w"}}}
	readyPods := func(nsSel *metav1.LabelSelector) *rebootv1.HealthGates {
		return &rebootv1.HealthGates{ReadyPods: &rebootv1.PodsGate{NamespaceSelector: nsSel, PodSelector: metav1.LabelSelector{MatchLabels: db}}}
	}
	for _, tc := range []struct {
		name    string
		gates   *rebootv1.HealthGates
		last    *rebootv1.DrainRecord
		objects []client.Object
		reason  string // "" passes
		names   string
	}{
		{name: "no gates", objects: []client.Object{pod("a", "x", db, "", corev1.PodRunning, false)}},
		{name: "evicted: replacement not Ready", gates: &rebootv1.HealthGates{EvictedPodsReady: true}, last: last,
			objects: []client.Object{pod("a", "w-1", nil, "w", corev1.PodRunning, true), pod("a", "w-2", nil, "w", corev1.PodPending, false)},
			reason:  rebootv1.ReasonEvictedPodsNotReady, names: "a/w-2 (ReplicaSet rs-w)"},
		{name: "evicted: all Ready", gates: &rebootv1.HealthGates{EvictedPodsReady: true}, last: last,
			objects: []client.Object{pod("a", "w-1", nil, "w", corev1.PodRunning, true), pod("a", "other", nil, "o", corev1.PodPending, false)}},
		{name: "evicted: a finished pod is not waited for", gates: &rebootv1.HealthGates{EvictedPodsReady: true}, last: last,
			objects: []client.Object{pod("a", "w-1", nil, "w", corev1.PodSucceeded, false)}},
		{name: "evicted: no drain yet", gates: &rebootv1.HealthGates{EvictedPodsReady: true},
			objects: []client.Object{pod("a", "w-1", nil, "w", corev1.PodPending, false)}},
		{name: "evicted: same name, other namespace", gates: &rebootv1.HealthGates{EvictedPodsReady: true}, last: last,
			objects: []client.Object{pod("b", "w-1", nil, "x", corev1.PodPending, false)}},
		{name: "pdb: exhausted anywhere", gates: &rebootv1.HealthGates{PodDisruptionBudgets: &rebootv1.NamespacesGate{}},
			objects: []client.Object{pdb("a", "ok", 1, 1), pdb("b", "full", 0, 1)},
			reason:  rebootv1.ReasonDisruptionsNotAllowed, names: "b/full"},
		{name: "pdb: not observed since it changed", gates: &rebootv1.HealthGates{PodDisruptionBudgets: &rebootv1.NamespacesGate{}},
			objects: []client.Object{pdb("a", "stale", 3, 2)},
			reason:  rebootv1.ReasonDisruptionsNotAllowed, names: "a/stale"},
		{name: "pdb: exhausted outside the selected namespaces", gates: &rebootv1.HealthGates{PodDisruptionBudgets: &rebootv1.NamespacesGate{NamespaceSelector: *watched}},
			objects: []client.Object{ns("a", map[string]string{"watch": "yes"}), ns("b", nil), pdb("a", "ok", 1, 1), pdb("b", "full", 0, 1)}},
		{name: "pods: one not Ready", gates: readyPods(nil),
			objects: []client.Object{pod("a", "db-0", db, "", corev1.PodRunning, true), pod("b", "db-1", db, "", corev1.PodRunning, false)},
			reason:  rebootv1.ReasonSelectedPodsNotReady, names: "1 of 2 selected pods are not Ready: b/db-1"},
		{name: "pods: none selected", gates: readyPods(nil),
			objects: []client.Object{pod("a", "web", map[string]string{"app": "web"}, "", corev1.PodRunning, true)},
			reason:  rebootv1.ReasonSelectedPodsNotReady, names: "no pod matches"},
		{name: "pods: not Ready outside the selected namespaces", gates: readyPods(watched),
			objects: []client.Object{ns("a", map[string]string{"watch": "yes"}), ns("b", nil),
				pod("a", "db-0", db, "", corev1.PodRunning, true), pod("b", "db-1", db, "", corev1.PodRunning, false)}},
		{name: "pods: all Ready", gates: readyPods(nil),
			objects: []client.Object{pod("a", "db-0", db, "", corev1.PodRunning, true), pod("b", "db-1", db, "", corev1.PodRunning, true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objects...).Build()
			rg := &rebootv1.RebootGroup{Spec: rebootv1.RebootGroupSpec{HealthGates: tc.gates}}
			h, err := Check(context.Background(), c, rg, tc.last)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.reason == "" && h != nil:
				t.Fatalf("held: %+v, want the gates to pass", h)
			case tc.reason != "" && h == nil:
				t.Fatalf("passed, want held by %s", tc.reason)
			case tc.reason != "" && (h.Reason != tc.reason || !strings.Contains(h.Message, tc.names)):
				t.Fatalf("held: %+v, want reason %s naming %q", h, tc.reason, tc.names)
			}
		})
	}
}

func TestWorkloads(t *testing.T) {
	pods := []corev1.Pod{*pod("b", "x", nil, "2", corev1.PodRunning, true), *pod("a", "y", nil, "1", corev1.PodRunning, true),
		*pod("a", "z", nil, "1", corev1.PodRunning, true), *pod("a", "bare", nil, "", corev1.PodRunning, true)}
	got := Workloads(pods)
	if len(got) != 2 || got[0].UID != "1" || got[1].UID != "2" || got[0].Namespace != "a" || got[0].Name != "rs-1" {
		t.Fatalf("Workloads = %+v, want rs-1 in a then rs-2 in b, each once, bare pods left out", got)
	}
}
