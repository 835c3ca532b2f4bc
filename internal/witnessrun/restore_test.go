package witnessrun

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/internal/witness"
	"github.com/kubext/kubext/test/testenv"
)

var testEnv *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, func(ctx context.Context, env *testenv.Env) error {
		testEnv = env
		return nil
	})
}

// agentLeases is the Lease client of node's deployed ip-agent: its
// service account (config/ip-agent, un-prefixed, in namespace "system"),
// with a token bound to the node, under its RBAC and admission policy.
func agentLeases(t *testing.T, node string) heartbeat.LeasesGetter {
	t.Helper()
	cfg := rest.CopyConfig(testEnv.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:system:ip-agent",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:system", "system:authenticated"},
		Extra:    map[string][]string{"authentication.kubernetes.io/node-name": {node}},
	}
	gv := schema.GroupVersion{Group: coordinationv1.GroupName, Version: "v1"}
	cfg.GroupVersion, cfg.APIPath = &gv, "/apis"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return heartbeat.SendOnce(rc)
}

// installAgentAccess makes namespace ns and installs the deployed
// ip-agent's RBAC and admission policy.
func installAgentAccess(t *testing.T, ns string) {
	t.Helper()
	ctx := t.Context()
	admin, err := client.New(testEnv.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := testEnv.Apply(ctx, "config/ip-agent/rbac.yaml", "config/policy/ip-agent.yaml"); err != nil {
		t.Fatal(err)
	}
}

// A restarted agent's witness must not answer a probe until no write of
// an earlier run can land any more: a declaration sent just before the
// earlier run died, still queued in the API server, would otherwise land
// after the new run read the Lease, and the controller would count a
// declaration this run contradicts by vouching (a split). restore confirms
// its read with a write conditional on it.
func TestRestoreLeavesNoEarlierWriteToLand(t *testing.T) {
	ctx := t.Context()
	const ns, node = "system", "node-w1"
	installAgentAccess(t, ns)
	leases := agentLeases(t, node).Leases(ns)
	name := heartbeat.LeaseName(ipv1.AgentComponent, node)
	log := logr.Discard()

	// No Lease yet (a first start, or an earlier run whose creation is
	// still on its way): restore creates it, with the generation and no
	// renewal, and an earlier run's creation landing later is refused.
	// (restore retries until RBAC and policy are loaded.)
	first, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pub0, _, _ := ed25519.GenerateKey(nil)
	gen0, _, err := restore(first, leases, node, pub0, log)
	if err != nil {
		t.Fatal(err)
	}
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Annotations[witness.AnnotationGeneration]; got != formatGen(gen0) || l.Spec.RenewTime != nil || *l.Spec.HolderIdentity != node {
		t.Fatalf("created %v (generation %q, want %d)", l, got, gen0)
	}
	// The run's key is published before any message is signed with it.
	if got, err := witness.ParsePublicKey(l.Annotations[witness.AnnotationPublicKey]); err != nil || !got.Equal(pub0) {
		t.Fatalf("created with key %q, want the run's: %v", l.Annotations[witness.AnnotationPublicKey], err)
	}
	earlier := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l.Labels,
		Annotations: map[string]string{witness.AnnotationDeclared: "node-h=3"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: l.Spec.HolderIdentity}}
	if _, err := leases.Create(ctx, earlier, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("an earlier run's creation landed after the restore: %v", err)
	}

	// The earlier run's copy of the Lease, and a declaration it sent from
	// that copy, still on its way when the next run restores: refused
	// when it lands.
	old := l.DeepCopy()
	pub1, _, _ := ed25519.GenerateKey(nil)
	gen1, declared, err := restore(ctx, leases, node, pub1, log)
	if err != nil {
		t.Fatal(err)
	}
	if gen1 <= gen0 || len(declared) != 0 {
		t.Fatalf("restored generation %d (before %d), declarations %v", gen1, gen0, declared)
	}
	old.Annotations[witness.AnnotationDeclared] = "node-h=3"
	if _, err := leases.Update(ctx, old, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("an earlier run's declaration landed after the restore: %v", err)
	}

	// A declaration that landed before the read is restored, and the
	// generation still moves on.
	l, err = leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := witness.ParsePublicKey(l.Annotations[witness.AnnotationPublicKey]); err != nil || !got.Equal(pub1) {
		t.Fatalf("the next run's key is not on the Lease: %q, %v", l.Annotations[witness.AnnotationPublicKey], err)
	}
	l.Annotations[witness.AnnotationDeclared] = "node-h=3"
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	gen2, declared, err := restore(ctx, leases, node, pub1, log)
	if err != nil {
		t.Fatal(err)
	}
	if gen2 <= gen1 || declared["node-h"] != 3 || len(declared) != 1 {
		t.Fatalf("restored generation %d (before %d), declarations %v; want node-h=3", gen2, gen1, declared)
	}
}
