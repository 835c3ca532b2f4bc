package pulsarproducer

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	. "github.com/onsi/gomega"
)

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestConfigFromEnv(t *testing.T) {
	g := NewWithT(t)
	cfg, err := ConfigFromEnv(lookup(map[string]string{
		EnvServer: " pulsar://localhost:6650 ", EnvTopic: "my-topic", EnvMessage: "Sample Message",
	}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg).To(Equal(Config{Server: "pulsar://localhost:6650", Topic: "my-topic", Message: "Sample Message"}))

	// The message is sent as is: spaces kept, and empty allowed when set.
	cfg, err = ConfigFromEnv(lookup(map[string]string{EnvServer: "pulsar+ssl://b:6651", EnvTopic: "t", EnvMessage: ""}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Message).To(BeEmpty())
}

func TestConfigFromEnvNamesEveryProblem(t *testing.T) {
	g := NewWithT(t)
	_, err := ConfigFromEnv(lookup(nil))
	g.Expect(err).To(HaveOccurred())
	for _, name := range []string{EnvServer, EnvTopic, EnvMessage} {
		g.Expect(err.Error()).To(ContainSubstring(name+" is not set"), "the error names %s", name)
	}
	_, err = ConfigFromEnv(lookup(map[string]string{EnvServer: "http://broker:8080", EnvTopic: "t", EnvMessage: "m"}))
	g.Expect(err).To(MatchError(ContainSubstring(`PULSAR_SERVER is "http://broker:8080", want a pulsar:// or pulsar+ssl:// URL`)))
}

// TestRunLogsTheBrokersMessageID stands in for the broker with a Sender
// that stores the message and answers with an ID, as a broker does.
func TestRunLogsTheBrokersMessageID(t *testing.T) {
	g := NewWithT(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var got Config
	err := Run(context.Background(), Config{Server: "pulsar://b:6650", Topic: "my-topic", Message: "Sample Message"}, log,
		func(_ context.Context, cfg Config, _ *slog.Logger) (pulsar.MessageID, error) {
			got = cfg
			return pulsar.EarliestMessageID(), nil
		})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Message).To(Equal("Sample Message"))
	g.Expect(logs.String()).To(ContainSubstring("msg=Sent topic=my-topic id="))
}

func TestRunReturnsTheBrokersRefusal(t *testing.T) {
	g := NewWithT(t)
	refused := errors.New("TopicTerminatedError")
	err := Run(context.Background(), Config{Topic: "t"}, slog.New(slog.DiscardHandler),
		func(context.Context, Config, *slog.Logger) (pulsar.MessageID, error) { return nil, refused })
	g.Expect(err).To(MatchError(refused))
}

// refusedServer is a loopback port nothing listens on: it stands in for a
// broker that is down.
func refusedServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "pulsar://" + addr
}

// silentServer accepts connections and never answers: a stalled broker
// (or a firewall that drops after the handshake).
func silentServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "pulsar://" + l.Addr().String()
}

// TestSendFailsWithinItsTimeout runs the real client against a broker that
// is down and one that never answers: both fail, within the timeout plus
// slack, with an error that names the server and the topic.
func TestSendFailsWithinItsTimeout(t *testing.T) {
	for name, server := range map[string]string{"refused": refusedServer(t), "silent": silentServer(t)} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			start := time.Now()
			_, err := Send(context.Background(), Config{Server: server, Topic: "my-topic", Message: "m", Timeout: 2 * time.Second},
				slog.New(slog.DiscardHandler))
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring("topic my-topic at " + server))
			g.Expect(time.Since(start)).To(BeNumerically("<", 15*time.Second), "bounded by the timeout, not the client's retries")
		})
	}
}

// TestSendStopsWhenCancelled: a signal (the context) ends a send that is
// still connecting, at once.
func TestSendStopsWhenCancelled(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	_, err := Send(ctx, Config{Server: silentServer(t), Topic: "t", Message: "m", Timeout: time.Minute}, slog.New(slog.DiscardHandler))
	g.Expect(err).To(MatchError(context.Canceled))
	g.Expect(time.Since(start)).To(BeNumerically("<", 10*time.Second))
	g.Expect(strings.Contains(err.Error(), "creating a producer")).To(BeTrue(), err.Error())
}
