package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The manager as deployed with webhooks on (the in-cluster default): under
// its ServiceAccount's name, bound to config/rbac's generated roles, it
// provisions its certificate before the webhook server starts, becomes
// ready only once that server answers with a certificate the webhook
// configuration trusts, and then makes the webhooks fail closed.
func TestManagerProvisionsItsWebhookCertificate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	admin, err := client.New(env.Config, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())

	// config/rbac/role.yaml's Role lives in the namespace "system" (kustomize
	// renames it at deploy time): run the manager there.
	const ns, sa = "system", "controller-manager"
	g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	g.Expect(env.Apply(ctx, "config/rbac/role.yaml")).To(Succeed())
	user := "system:serviceaccount:" + ns + ":" + sa
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	g.Expect(admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "manager-test"}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "manager-role"}})).To(Succeed())
	g.Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "manager-test"}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "manager-role"}})).To(Succeed())
	manager, err := env.AddUser(envtest.User{Name: user, Groups: []string{"system:serviceaccounts", "system:authenticated"}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	managerKubeconfig, err := manager.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	path := t.TempDir() + "/kubeconfig"
	g.Expect(os.WriteFile(path, managerKubeconfig, 0o600)).To(Succeed())

	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	port := l.Addr().(*net.TCPAddr).Port
	g.Expect(l.Close()).To(Succeed())
	ignore, url := admissionregistrationv1.Ignore, fmt.Sprintf("https://127.0.0.1:%d/validate", port)
	none := admissionregistrationv1.SideEffectClassNone
	g.Expect(admin.Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "kubext-validating-webhook-configuration"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "vippool.ip.kubext.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
			FailurePolicy: &ignore, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
		}},
	})).To(Succeed())

	// A process of its own: controller names are unique per process, and
	// other tests here have run the same controllers already.
	probes := freeAddr(t)
	args, err := json.Marshal([]string{"--kubeconfig", path, "--metrics-bind-address=0", "--health-probe-bind-address", probes,
		"--enable-webhooks", "--webhook-namespace", ns, "--webhook-port", strconv.Itoa(port),
		"--webhook-cert-dir", t.TempDir(), "--heartbeat-namespace", ns})
	g.Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(os.Args[0], "-test.run=^TestManagerProcess$")
	cmd.Env = append(os.Environ(), managerArgsEnv+"="+string(args))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	g.Expect(cmd.Start()).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
	}()
	g.Eventually(func(g Gomega) {
		select {
		case err := <-done:
			StopTrying("the manager stopped").Wrap(err).Now()
		default:
		}
		code, _, err := get("http://" + probes + "/readyz")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	secret := &corev1.Secret{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kubext-webhook-server-cert"}, secret)).To(Succeed())
	g.Eventually(func(g Gomega) {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: "kubext-validating-webhook-configuration"}, vwc)).To(Succeed())
		g.Expect(vwc.Webhooks[0].ClientConfig.CABundle).To(Equal(secret.Data["ca.crt"]))
		g.Expect(*vwc.Webhooks[0].FailurePolicy).To(Equal(admissionregistrationv1.Fail))
	}, 20*time.Second, 200*time.Millisecond).Should(Succeed())

	g.Expect(cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	g.Eventually(done, 20*time.Second).Should(Receive(BeNil()), "the manager stops cleanly")
	done <- nil
}

// managerArgsEnv carries the arguments of TestManagerProcess.
const managerArgsEnv = "KUBEXT_TEST_MANAGER_ARGS"

// TestManagerProcess is the manager process of the tests above: it runs
// run with the arguments in $KUBEXT_TEST_MANAGER_ARGS until SIGTERM, and
// does nothing when started by `go test` itself.
func TestManagerProcess(t *testing.T) {
	raw := os.Getenv(managerArgsEnv)
	if raw == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := run(ctx, args); err != nil {
		t.Fatal(err)
	}
}
