package redis

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	"github.com/kubext/kubext/internal/cachetrim"
	"github.com/kubext/kubext/test/repo"
	"github.com/kubext/kubext/test/testenv"
)

const (
	// deployedNS is the namespace of the manager run under its deployed
	// identity; the suite's manager leaves it alone (suite_test.go).
	deployedNS = "redis-deployed"
	// managerUser is the manager's service account as config/default
	// names it, which config/policy/manager-secrets.yaml matches.
	managerUser = "system:serviceaccount:kubext-system:kubext-controller-manager"
	// secretPolicy is config/policy/manager-secrets.yaml's policy.
	secretPolicy = "manager-secret-writes.cache.kubext.io"
)

// The Redis controller as deployed with only itself enabled (the chart's
// controllers: [redis]): under the manager's service account, bound to
// the rules its markers generate (config/rbac/controllers/core and redis),
// with config/policy/manager-secrets.yaml installed. Its Secret create
// right (RBAC cannot say which Secrets) would let a holder of its identity
// mint a service-account token Secret and read the token back; the
// policy leaves it the one Secret it needs, which the controller then
// generates for a Redis that names none and uses.
func TestDeployedManagerGeneratesPasswordsAndNothingElse(t *testing.T) {
	f := newFixture(t)
	g := f.G
	ctx := t.Context()
	manager := deployedManager(t, g, "config/rbac/controllers/core/role.yaml", "config/rbac/controllers/redis/role.yaml")

	// What a holder of the manager's identity could forge, each refused by
	// the policy with the message given.
	owner := func(apiVersion, kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID("0f6bd3a0-5f5e-4d8b-9d8e-" + f.ID + "0000000")[:36]}}
	}
	forged := []struct {
		name    string
		secret  *corev1.Secret
		refused string
	}{
		{"a service-account token, even owned by a Redis", &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: deployedNS, Name: "x-auth", OwnerReferences: owner("cache.kubext.io/v1alpha1", "Redis", "x"),
				Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
			Type: corev1.SecretTypeServiceAccountToken,
		}, "the kubext manager may write only Opaque Secrets, not kubernetes.io/service-account-token ones"},
		{"an Opaque Secret without an owner", &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: deployedNS, Name: "loose"},
			Data:       map[string][]byte{"k": []byte("v")},
		}, "not Secret loose without an owner"},
		{"an Opaque Secret of another owner", &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: deployedNS, Name: "cm-auth", OwnerReferences: owner("v1", "ConfigMap", "cm")},
		}, "not Secret cm-auth owned by ConfigMap cm"},
		{"a Redis's Secret of another name", &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: deployedNS, Name: "tls", OwnerReferences: owner("cache.kubext.io/v1alpha1", "Redis", "x")},
		}, "not Secret tls owned by Redis x"},
		{"the webhook certificate's name, outside the manager's namespace", &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: deployedNS, Name: "kubext-webhook-server-cert"},
		}, "not Secret kubext-webhook-server-cert without an owner"},
		{"another name in the manager's namespace", &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kubext-system", Name: "kubext-other"},
		}, "not Secret kubext-other without an owner"},
	}
	// Without the policy, RBAC alone lets the manager's identity make every
	// one of them (a dry run: nothing is kept).
	for _, tc := range forged {
		g.Expect(manager.Create(ctx, tc.secret.DeepCopy(), client.DryRunAll)).To(Succeed(), "without the policy: %s", tc.name)
	}

	g.Expect(testEnv().Apply(ctx, "config/policy/manager-secrets.yaml")).To(Succeed())
	t.Cleanup(func() {
		// Unloaded before the next tests: until a dry run it refused passes.
		deleteSecretPolicy()
		g.Eventually(func() error {
			return manager.Create(context.Background(), forged[0].secret.DeepCopy(), client.DryRunAll)
		},
			testenv.WaitFor, 100*time.Millisecond).Should(Succeed(), "the policy still applies after its deletion")
	})
	g.Eventually(func() error { return manager.Create(ctx, forged[0].secret.DeepCopy(), client.DryRunAll) },
		testenv.WaitFor, 100*time.Millisecond).Should(MatchError(ContainSubstring(forged[0].refused)))
	for _, tc := range forged {
		err := manager.Create(ctx, tc.secret.DeepCopy())
		g.Expect(err).To(MatchError(ContainSubstring(tc.refused)), tc.name)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", tc.name, err)
	}
	// The Secrets it keeps in its own namespace stay its to write: its
	// webhook certificate's (internal/webhookcert) and the witness key
	// (internal/witnesskey); as does a Redis's <name>-auth.
	for _, name := range []string{"kubext-webhook-server-cert", "kubext-witness-key"} {
		g.Expect(manager.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kubext-system", Name: name}},
			client.DryRunAll)).To(Succeed(), name)
	}
	g.Expect(manager.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: deployedNS, Name: "x-auth",
		OwnerReferences: owner("cache.kubext.io/v1alpha1", "Redis", "x")}}, client.DryRunAll)).To(Succeed())

	// The controller, under that identity and policy, generates the
	// password of a Redis that names none, and uses it.
	runDeployedManager(t, g)
	key := f.Create(&cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Namespace: deployedNS, Name: "gen-" + f.ID}, Spec: size(2)})
	secretKey := client.ObjectKey{Namespace: deployedNS, Name: key.Name + "-auth"}
	secret := testenv.Eventually(f.Fixture, secretKey, &corev1.Secret{}, func(g Gomega, s *corev1.Secret) {})
	rd := f.Get(key, &cachev1.Redis{}).(*cachev1.Redis)
	isControlledBy(g, secret, rd)
	g.Expect(secret.Type).To(Equal(corev1.SecretTypeOpaque))
	g.Expect(secret.Data).To(HaveLen(1))
	g.Expect(secret.Data["password"]).To(MatchRegexp(`^[-_A-Za-z0-9]{43}$`))
	testenv.Eventually(f.Fixture, key, &cachev1.Redis{}, func(g Gomega, rd *cachev1.Redis) {
		g.Expect(rd.Status.PasswordSecretKeyRef).To(Equal(&cachev1.SecretKeyRef{Name: secretKey.Name, Key: "password"}))
	})
	sts := f.Get(key, &appsv1.StatefulSet{}).(*appsv1.StatefulSet)
	c := sts.Spec.Template.Spec.Containers[0]
	g.Expect(c.Args).To(ContainElements("--requirepass", "$(REDIS_PASSWORD)", "--masterauth"))
	g.Expect(argValue(c.Args, "--protected-mode")).To(Equal("yes"))
	g.Expect(c.Env).To(HaveLen(2))
	for _, e := range c.Env {
		g.Expect(e.ValueFrom.SecretKeyRef.Name).To(Equal(secretKey.Name), e.Name)
		g.Expect(e.ValueFrom.SecretKeyRef.Key).To(Equal("password"), e.Name)
	}
	// The members require that password (the fake servers refuse any
	// other): the Redis is Ready only if the controller's client gives it.
	f.members(key, 2)
	f.condition(key, cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonReplicating)
	f.event(key, "Created")
}

// testEnv is the suite's envtest, for Apply.
func testEnv() *testenv.Env { return suiteEnv }

func deleteSecretPolicy() {
	ctx := context.Background()
	_ = k8s.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: secretPolicy}})
	_ = k8s.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: secretPolicy}})
}

// deployedManager is a client of the manager's service account, bound to
// the rules of the ClusterRoles in roles (bindManagerRules), with the
// namespaces the deployed-manager tests use.
func deployedManager(t *testing.T, g *WithT, roles ...string) client.Client {
	t.Helper()
	for _, name := range []string{deployedNS, "kubext-system"} {
		if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	bindManagerRules(t, g, roles...)
	manager, err := client.New(managerConfig(), client.Options{Scheme: k8s.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	return manager
}

// managerConfig is the API server's configuration for the manager's
// service account, the way its pod's token authenticates it.
func managerConfig() *rest.Config {
	cfg := rest.CopyConfig(apiServer)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: managerUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kubext-system", "system:authenticated"}}
	return cfg
}

// bindManagerRules binds the manager's service account to the rules of the
// ClusterRoles in files (repository paths), and nothing else, until the
// test ends.
func bindManagerRules(t *testing.T, g *WithT, files ...string) {
	t.Helper()
	root, err := repo.Root()
	g.Expect(err).NotTo(HaveOccurred())
	var rules []rbacv1.PolicyRule
	for _, file := range files {
		data, err := os.Open(filepath.Join(root, file))
		g.Expect(err).NotTo(HaveOccurred())
		dec := yaml.NewYAMLOrJSONDecoder(data, 4096)
		for {
			var doc rbacv1.ClusterRole
			if err := dec.Decode(&doc); err != nil {
				g.Expect(errors.Is(err, io.EOF)).To(BeTrue(), "%s: %v", file, err)
				break
			}
			if doc.Kind == "ClusterRole" {
				rules = append(rules, doc.Rules...)
			}
		}
		_ = data.Close()
	}
	g.Expect(rules).NotTo(BeEmpty())
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-redis-manager"}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: managerUser}}}
	for _, o := range []client.Object{role, binding} {
		g.Expect(k8s.Create(ctx, o)).To(Succeed())
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}
}

// runDeployedManager runs the Redis controller as the manager's service
// account, watching deployedNS only, until the test ends.
func runDeployedManager(t *testing.T, g *WithT) {
	opts := ctrl.Options{Cache: cachetrim.Options("kubext-system"), Scheme: k8s.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"}}
	opts.Cache.DefaultNamespaces = map[string]cache.Config{deployedNS: {}}
	// The suite's manager runs a controller of the same name.
	opts.Controller.SkipNameValidation = ptr.To(true)
	m, err := ctrl.NewManager(managerConfig(), opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(newReconciler(m, m.GetClient(), "redis-controller").SetupWithManager(m)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	testenv.StartManager(ctx, m)
}

// argValue is the argument after flag in args ("" without it).
func argValue(args []string, flag string) string {
	for i := range len(args) - 1 {
		if args[i] == flag {
			return args[i+1]
		}
	}
	return ""
}
