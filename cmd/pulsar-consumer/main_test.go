package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
)

// runMain makes the test binary the program, for the tests to run it as a
// process and signal it.
const runMain = "PULSAR_CONSUMER_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// output collects what the program writes, safe to read while it runs.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// start runs the program with the environment a PulsarConsumer's
// Deployment would give it, plus env.
func start(t *testing.T, env ...string) (*exec.Cmd, *output) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), runMain+"=1")
	cmd.Env = append(cmd.Env, env...)
	out := &output{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, out
}

// freeAddress is a loopback address and port nothing listens on.
func freeAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestSIGTERMStopsAConsumerThatCannotSubscribe runs the program against a
// loopback port that refuses connections, standing in for a broker that is
// down: the Pulsar client retries it inside a subscription attempt that
// lasts 30 s, and SIGTERM must still stop the program at once, with exit
// status 0, as the kubelet expects within the pod's grace period.
func TestSIGTERMStopsAConsumerThatCannotSubscribe(t *testing.T) {
	g := NewWithT(t)
	health := freeAddress(t)
	cmd, out := start(t,
		pulsarv1.EnvServerAddress+"=pulsar://"+freeAddress(t),
		pulsarv1.EnvTopic+"=orders",
		pulsarv1.EnvSubscription+"=audit",
		pulsarv1.EnvSubscriptionType+"=Failover",
		pulsarv1.EnvConsumerName+"=orders-0",
		pulsarv1.EnvHealthAddress+"="+health,
	)
	g.Eventually(func() int { return strings.Count(out.String(), "Failed to connect to broker") }, 10*time.Second).
		Should(BeNumerically(">=", 2), "the client retries the broker")

	// Alive, not ready: the Deployment does not count it as a consumer.
	code, _ := get("http://" + health + "/healthz")
	g.Expect(code).To(Equal(http.StatusOK))
	code, _ = get("http://" + health + "/readyz")
	g.Expect(code).To(Equal(http.StatusServiceUnavailable))
	code, metrics := get("http://" + health + "/metrics")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(metrics).To(ContainSubstring("pulsar_client_"))

	g.Expect(cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	g.Eventually(exited, 5*time.Second).Should(Receive(&err), "stopped long before the 30 s operation timeout")
	g.Expect(err).NotTo(HaveOccurred(), out.String())
	g.Expect(out.String()).To(ContainSubstring("Stopped before subscribing"))
	g.Expect(out.String()).To(ContainSubstring("type=Failover"))
}

func TestMissingConfigurationFails(t *testing.T) {
	g := NewWithT(t)
	cmd, out := start(t, pulsarv1.EnvTopic+"=orders")
	err := cmd.Wait()
	var exit *exec.ExitError
	g.Expect(errors.As(err, &exit)).To(BeTrue(), "exits non-zero: %v", err)
	g.Expect(exit.ExitCode()).To(Equal(1))
	g.Expect(out.String()).To(And(ContainSubstring("PULSAR_SERVER_ADDRESS is not set"), ContainSubstring("PULSAR_SUBSCRIPTION is not set")))
}
