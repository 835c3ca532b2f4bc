package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubext/kubext/test/testenv"
)

var (
	env        *testenv.Env
	kubeconfig string
)

func TestMain(m *testing.M) {
	if os.Getenv(managerArgsEnv) != "" {
		// The manager process of a test (see TestManagerProcess): it talks to
		// its parent's API server.
		os.Exit(m.Run())
	}
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer func() { _ = env.Stop() }()
		dir, err := os.MkdirTemp("", "manager-test")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if kubeconfig, err = env.WriteKubeconfig(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// The manager starts against a real API server, serves its probes and
// metrics, and with --leader-elect holds the leader Lease.
func TestManagerServesProbesMetricsAndElectsLeader(t *testing.T) {
	g := NewWithT(t)
	metrics, probes := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--kubeconfig", kubeconfig, "--metrics-bind-address", metrics,
			"--health-probe-bind-address", probes, "--leader-elect", "--leader-election-namespace", "default",
			"--enable-webhooks=false"})
	}()

	for _, path := range []string{"/healthz", "/readyz"} {
		g.Eventually(func() (int, error) {
			code, _, err := get("http://" + probes + path)
			return code, err
		}, 20*time.Second, 100*time.Millisecond).Should(Equal(http.StatusOK), path)
	}
	g.Eventually(func() (string, error) {
		_, body, err := get("http://" + metrics + "/metrics")
		return body, err
	}, 20*time.Second, 100*time.Millisecond).Should(ContainSubstring("leader_election_master_status"))
	_, body, err := get("http://" + metrics + "/metrics")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(body).To(MatchRegexp(`(?m)^kubext_build_info\{goversion="go[^"]+",revision="[^"]+",version="[^"]+"\} 1$`))

	c, err := client.New(env.Config, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() (string, error) {
		var lease coordinationv1.Lease
		err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "manager.kubext.io"}, &lease)
		if err != nil || lease.Spec.HolderIdentity == nil {
			return "", err
		}
		return *lease.Spec.HolderIdentity, nil
	}, 20*time.Second, 100*time.Millisecond).ShouldNot(BeEmpty())

	cancel()
	g.Eventually(done, 20*time.Second).Should(Receive(BeNil()))
}

// --version answers without a cluster: it must not need a kubeconfig.
func TestManagerVersion(t *testing.T) {
	g := NewWithT(t)
	t.Setenv("KUBECONFIG", "/nonexistent")
	g.Expect(run(context.Background(), []string{"--version"})).To(Succeed())
}

func TestManagerRefusesUnknownController(t *testing.T) {
	g := NewWithT(t)
	err := run(context.Background(), []string{"--kubeconfig", kubeconfig, "--controllers", "nosuch"})
	g.Expect(err).To(MatchError(ContainSubstring(`unknown controller "nosuch"`)))
}

func TestManagerWithWebhooksNeedsACertificate(t *testing.T) {
	g := NewWithT(t)
	err := run(context.Background(), []string{"--kubeconfig", kubeconfig, "--enable-webhooks",
		"--webhook-cert-source=external", "--webhook-cert-dir", t.TempDir()})
	g.Expect(err).To(MatchError(ContainSubstring("--enable-webhooks=false")))
	// Out of cluster there is no namespace to keep the certificate in.
	err = run(context.Background(), []string{"--kubeconfig", kubeconfig, "--enable-webhooks", "--webhook-cert-dir", t.TempDir()})
	g.Expect(err).To(MatchError(ContainSubstring("--enable-webhooks=false")))
	err = run(context.Background(), []string{"--kubeconfig", kubeconfig, "--webhook-cert-source=cert-manager"})
	g.Expect(err).To(MatchError(ContainSubstring("--webhook-cert-source must be self or external")))
}

func TestSelectControllers(t *testing.T) {
	g := NewWithT(t)
	all, err := selectControllers("all")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(all)).To(Equal(controllerNames()))
	_, err = selectControllers(" , ")
	g.Expect(err).To(MatchError(ContainSubstring("unknown controller")))
	g.Expect(strings.Join(controllerNames(), ",")).To(Equal(strings.Join(names(controllers), ",")))
}
