package redis

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
)

// A manager whose Secret rights do not reach a Redis's namespace (the
// chart's rbac.redisSecretNamespaces) says so in the Redis's Ready
// condition and looks again later, rather than failing the reconcile
// with a bare error: the API server itself refuses the read here, for an
// identity that holds no right to Secrets.
func TestForbiddenSecretIsReported(t *testing.T) {
	ctx := t.Context()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forbidden-pw"},
		Data:       map[string][]byte{"password": []byte("pw")},
	}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, secret) })

	cfg := rest.CopyConfig(apiServer)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:kubext-system:no-secrets"}
	reader, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{APIReader: reader}
	rd := &cachev1.Redis{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forbidden", Generation: 1},
		Spec:       cachev1.RedisSpec{Size: 1, PasswordSecretKeyRef: &cachev1.SecretKeyRef{Name: secret.Name, Key: "password"}},
	}
	pw, err := r.password(ctx, rd)
	if !errors.Is(err, errNoSecret) || pw != "" {
		t.Fatalf("password() = %q, %v; want errNoSecret", pw, err)
	}
	c := meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != cachev1.ReasonSecretForbidden {
		t.Fatalf("Ready = %+v, want False/%s", c, cachev1.ReasonSecretForbidden)
	}
	want := "kubext may not read Secret forbidden-pw (spec.passwordSecretKeyRef): its manager is granted Secrets only in some namespaces, not " + ns
	if len(c.Message) < len(want) || c.Message[:len(want)] != want {
		t.Errorf("message %q, want it to start with %q", c.Message, want)
	}

	// The same read by the manager's admin client succeeds: the condition
	// above is the refusal's doing, not a missing Secret.
	r.APIReader = k8s
	if pw, err := r.password(ctx, rd); err != nil || pw != "pw" {
		t.Errorf("password() as admin = %q, %v; want pw", pw, err)
	}
}
