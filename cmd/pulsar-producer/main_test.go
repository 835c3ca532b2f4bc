package main

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/kubext/kubext/internal/pulsarproducer"
)

// runMain makes the test binary the program, for the tests to run it as a
// process, as users do, and read its exit code.
const runMain = "PULSAR_PRODUCER_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// producer runs the program with exactly env (plus what makes it the
// program) and returns its output and exit code.
func producer(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append([]string{runMain + "=1"}, env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func TestMissingConfigurationFailsNamingEachVariable(t *testing.T) {
	g := NewWithT(t)
	out, code := producer(t, nil)
	g.Expect(code).To(Equal(1))
	for _, name := range []string{pulsarproducer.EnvServer, pulsarproducer.EnvTopic, pulsarproducer.EnvMessage} {
		g.Expect(out).To(ContainSubstring(name + " is not set"))
	}
}

func TestVersion(t *testing.T) {
	g := NewWithT(t)
	out, code := producer(t, nil, "--version")
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(ContainSubstring("revision "))
}

// TestTheSeedsCommandAgainstABrokerThatIsDown runs the seed's command line
// against a loopback port that refuses connections (standing in for a
// broker that is down; no Pulsar broker runs on these machines): it exits 1
// within its timeout and says what it could not reach.
func TestTheSeedsCommandAgainstABrokerThatIsDown(t *testing.T) {
	g := NewWithT(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	addr := l.Addr().String()
	g.Expect(l.Close()).To(Succeed())
	start := time.Now()
	out, code := producer(t, []string{
		"PULSAR_SERVER=pulsar://" + addr, "PULSAR_MESSAGE=Sample Message", "PULSAR_TOPIC=my-topic",
	}, "--timeout=2s")
	g.Expect(code).To(Equal(1), out)
	g.Expect(out).To(ContainSubstring("Producer failed"))
	g.Expect(out).To(ContainSubstring("topic my-topic at pulsar://" + addr))
	g.Expect(time.Since(start)).To(BeNumerically("<", 20*time.Second))
	g.Expect(strings.Count(out, "Sent ")).To(BeZero())
}

func TestBadTimeoutIsRefused(t *testing.T) {
	g := NewWithT(t)
	out, code := producer(t, nil, "--timeout=0s")
	g.Expect(code).To(Equal(1))
	g.Expect(out).To(ContainSubstring("--timeout is 0s, want a positive duration"))
}
