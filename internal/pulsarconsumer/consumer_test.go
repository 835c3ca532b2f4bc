package pulsarconsumer

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	. "github.com/onsi/gomega"

	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
)

// records is a slog handler that keeps every record, for tests to read
// what the consumer logged.
type records struct {
	mu   sync.Mutex
	list []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, rec)
	return nil
}

// with returns the records of a message, each as its attributes.
func (r *records) with(msg string) []map[string]slog.Value {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]slog.Value
	for _, rec := range r.list {
		if rec.Message != msg {
			continue
		}
		attrs := map[string]slog.Value{"time": slog.TimeValue(rec.Time)}
		rec.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value
			return true
		})
		out = append(out, attrs)
	}
	return out
}

// message stands in for a message a broker delivered: it answers what the
// consumer asks of a pulsar.Message.
type message struct {
	pulsar.Message
	id      pulsar.MessageID
	key     string
	payload string
}

func (m *message) Topic() string           { return "persistent://public/default/orders" }
func (m *message) ID() pulsar.MessageID    { return m.id }
func (m *message) Key() string             { return m.key }
func (m *message) Payload() []byte         { return []byte(m.payload) }
func (m *message) PublishTime() time.Time  { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
func (m *message) RedeliveryCount() uint32 { return 0 }

// consumer stands in for the client's pulsar.Consumer attached to a
// broker: Receive hands out what is sent on deliver, blocking like the
// real one until a message comes or ctx ends; Ack records the message, or
// fails when ackErr says so; a failed receive is sent on fail.
type consumer struct {
	pulsar.Consumer
	deliver chan pulsar.Message
	fail    chan error
	ackErr  func(pulsar.Message) error

	mu     sync.Mutex
	acked  []pulsar.MessageID
	closed bool
}

func newConsumer() *consumer {
	return &consumer{deliver: make(chan pulsar.Message), fail: make(chan error, 1)}
}

func (c *consumer) Receive(ctx context.Context) (pulsar.Message, error) {
	select {
	case m := <-c.deliver:
		return m, nil
	case err := <-c.fail:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *consumer) Ack(m pulsar.Message) error {
	if c.ackErr != nil {
		if err := c.ackErr(m); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acked = append(c.acked, m.ID())
	return nil
}

func (c *consumer) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
}

func (c *consumer) Subscription() string { return "audit" }
func (c *consumer) Name() string         { return "consumer-0" }

func (c *consumer) state() (acked []pulsar.MessageID, closed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]pulsar.MessageID(nil), c.acked...), c.closed
}

// client stands in for the pulsar.Client the consumer came from: the
// consumer only ever closes it.
type client struct {
	pulsar.Client
	mu     sync.Mutex
	closed bool
}

func (c *client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
}

func (c *client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func TestConfigFromEnv(t *testing.T) {
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	g := NewWithT(t)
	cfg, err := ConfigFromEnv(env(map[string]string{
		pulsarv1.EnvServerAddress:    "pulsar://broker:6650",
		pulsarv1.EnvTopic:            "orders",
		pulsarv1.EnvSubscription:     "audit",
		pulsarv1.EnvSubscriptionType: "KeyShared",
		pulsarv1.EnvConsumerName:     "orders-7d9f-x2",
		pulsarv1.EnvHealthAddress:    ":8080",
	}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg).To(Equal(Config{ServerAddress: "pulsar://broker:6650", Topic: "orders", Subscription: "audit",
		SubscriptionType: pulsarv1.SubscriptionKeyShared, ConsumerName: "orders-7d9f-x2", HealthAddress: ":8080"}))

	cfg, err = ConfigFromEnv(env(map[string]string{
		pulsarv1.EnvServerAddress: "pulsar://broker:6650", pulsarv1.EnvTopic: "orders", pulsarv1.EnvSubscription: "audit",
	}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.SubscriptionType).To(Equal(pulsarv1.SubscriptionShared), "the API's default")

	_, err = ConfigFromEnv(env(map[string]string{pulsarv1.EnvTopic: " ", pulsarv1.EnvSubscriptionType: "Broadcast"}))
	g.Expect(err).To(MatchError(And(
		ContainSubstring("PULSAR_SERVER_ADDRESS is not set"),
		ContainSubstring("PULSAR_TOPIC is not set"),
		ContainSubstring("PULSAR_SUBSCRIPTION is not set"),
		ContainSubstring(`PULSAR_SUBSCRIPTION_TYPE is "Broadcast", want Exclusive, Shared, Failover or KeyShared`))))
}

func TestBackoffDelays(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	for range 50 {
		delay := b.delays()
		for n, want := range []time.Duration{100, 200, 400, 800, 1000, 1000, 1000} {
			want *= time.Millisecond
			if d := delay(); d > want || d < want*4/5 {
				t.Fatalf("retry %d waits %v, want between %v and %v", n, d, want*4/5, want)
			}
		}
		// A retry count that would overflow stays at the cap.
		for range 200 {
			delay()
		}
		if d := delay(); d > time.Second || d < 800*time.Millisecond {
			t.Fatalf("retry 208 waits %v, want the cap", d)
		}
	}
	// An initial wait over the cap is capped too.
	if d := (Backoff{Initial: time.Minute, Max: time.Second}).delays()(); d > time.Second {
		t.Fatalf("first wait %v, want at most the cap", d)
	}
}

func TestConsumeLogsAndAcknowledgesEveryMessage(t *testing.T) {
	g := NewWithT(t)
	logs := &records{}
	c := newConsumer()
	c.ackErr = func(m pulsar.Message) error {
		if m.Key() == "unlucky" {
			return errors.New("connection closed")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Consume(ctx, c, slog.New(logs)) }()

	sent := []*message{
		{id: pulsar.NewMessageID(7, 1, -1, 0), key: "k1", payload: "Sample Message"},
		{id: pulsar.NewMessageID(7, 2, -1, 0), key: "unlucky", payload: "not acknowledged"},
		{id: pulsar.NewMessageID(7, 3, -1, 0), payload: "third"},
	}
	for _, m := range sent {
		c.deliver <- m
	}
	cancel()
	g.Eventually(done).Should(Receive(BeNil()), "a stop is not an error")

	received := logs.with("Received message")
	g.Expect(received).To(HaveLen(3))
	for i, m := range sent {
		g.Expect(received[i]["content"].String()).To(Equal(m.payload))
		g.Expect(received[i]["id"].String()).To(Equal(m.id.String()))
		g.Expect(received[i]["key"].String()).To(Equal(m.key))
		g.Expect(received[i]["topic"].String()).To(Equal("persistent://public/default/orders"))
	}
	acked, _ := c.state()
	g.Expect(acked).To(Equal([]pulsar.MessageID{sent[0].id, sent[2].id}))
	warned := logs.with("Cannot acknowledge message; the broker will deliver it again")
	g.Expect(warned).To(HaveLen(1))
	g.Expect(warned[0]["id"].String()).To(Equal(sent[1].id.String()))
}

func TestConsumeLogsABoundedPayload(t *testing.T) {
	g := NewWithT(t)
	logs := &records{}
	c := newConsumer()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Consume(ctx, c, slog.New(logs)) }()
	big := make([]byte, 3*maxLoggedPayload)
	for i := range big {
		big[i] = 'x'
	}
	c.deliver <- &message{id: pulsar.NewMessageID(1, 1, -1, 0), payload: string(big)}
	cancel()
	g.Eventually(done).Should(Receive(BeNil()))
	rec := logs.with("Received message")[0]
	g.Expect(rec["content"].String()).To(HaveLen(maxLoggedPayload))
	g.Expect(rec["bytes"].Int64()).To(BeEquivalentTo(3 * maxLoggedPayload))
}

func TestConsumeReturnsAFailedReceive(t *testing.T) {
	c := newConsumer()
	closed := errors.New("consumer closed")
	c.fail <- closed
	NewWithT(t).Expect(Consume(t.Context(), c, slog.New(&records{}))).To(MatchError(closed))
}

// ready is what the readiness probe sees.
func ready(c *Consumer) int {
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return rec.Code
}

// TestRunClosesConsumerAndClientOnStop stands in for the broker with a
// Subscriber: the first attempt fails as an unreachable broker does, the
// second returns a consumer attached to the subscription.
func TestRunClosesConsumerAndClientOnStop(t *testing.T) {
	g := NewWithT(t)
	logs := &records{}
	cons, cl := newConsumer(), &client{}
	attempts := 0
	c := &Consumer{
		Config:  Config{ServerAddress: "pulsar://broker:6650", Topic: "orders", Subscription: "audit"},
		Backoff: Backoff{Initial: time.Millisecond, Max: time.Millisecond},
		Log:     slog.New(logs),
		Subscribe: func(context.Context, Config, *slog.Logger) (pulsar.Client, pulsar.Consumer, error) {
			attempts++
			if attempts == 1 {
				return nil, nil, errors.New("connection refused")
			}
			return cl, cons, nil
		},
	}
	g.Expect(ready(c)).To(Equal(http.StatusServiceUnavailable))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	msg := &message{id: pulsar.NewMessageID(3, 4, -1, 0), payload: "hello"}
	cons.deliver <- msg
	g.Eventually(func() int { return ready(c) }).Should(Equal(http.StatusOK))
	g.Eventually(func() []pulsar.MessageID { acked, _ := cons.state(); return acked }).Should(Equal([]pulsar.MessageID{msg.id}))
	g.Expect(logs.with("Cannot subscribe, will retry")).To(HaveLen(1))

	cancel()
	g.Eventually(done).Should(Receive(BeNil()))
	_, closed := cons.state()
	g.Expect(closed).To(BeTrue(), "consumer closed")
	g.Expect(cl.isClosed()).To(BeTrue(), "client closed")
	g.Expect(logs.with("Stopped: consumer and client closed")).To(HaveLen(1))
	g.Expect(ready(c)).To(Equal(http.StatusServiceUnavailable))
}

// TestRunSubscribesAgainAfterAFailedReceive stands in for the broker with
// a Subscriber whose first consumer stops receiving, as one whose
// subscription was removed on the broker does.
func TestRunSubscribesAgainAfterAFailedReceive(t *testing.T) {
	g := NewWithT(t)
	first, second := newConsumer(), newConsumer()
	firstClient, secondClient := &client{}, &client{}
	first.fail <- errors.New("consumer closed")
	sessions := []struct {
		client   *client
		consumer *consumer
	}{{firstClient, first}, {secondClient, second}}
	c := &Consumer{
		Config: Config{ServerAddress: "pulsar://broker:6650", Topic: "orders", Subscription: "audit"},
		Log:    slog.New(&records{}),
		Subscribe: func(context.Context, Config, *slog.Logger) (pulsar.Client, pulsar.Consumer, error) {
			s := sessions[0]
			sessions = sessions[1:]
			return s.client, s.consumer, nil
		},
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	second.deliver <- &message{id: pulsar.NewMessageID(1, 1, -1, 0), payload: "after"}
	_, firstClosed := first.state()
	g.Expect(firstClosed).To(BeTrue())
	g.Expect(firstClient.isClosed()).To(BeTrue())
	cancel()
	g.Eventually(done).Should(Receive(BeNil()))
	g.Expect(secondClient.isClosed()).To(BeTrue())
}

// refusedAddress is a loopback port nothing listens on: it stands in for
// a broker that is down, which refuses connections.
func refusedAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestRunRetriesARefusedBrokerWithBackoff runs the real Apache Pulsar
// client against a loopback port that refuses connections, standing in
// for a broker that is down: each attempt to subscribe fails after the
// operation timeout, and the waits between attempts double up to the cap.
// Stopping while an attempt is under way returns at once.
func TestRunRetriesARefusedBrokerWithBackoff(t *testing.T) {
	g := NewWithT(t)
	logs := &records{}
	c := &Consumer{
		Config: Config{ServerAddress: "pulsar://" + refusedAddress(t), Topic: "orders", Subscription: "audit",
			SubscriptionType: pulsarv1.SubscriptionShared, OperationTimeout: 200 * time.Millisecond},
		Backoff: Backoff{Initial: 100 * time.Millisecond, Max: 400 * time.Millisecond},
		Log:     slog.New(logs),
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	retries := func() []map[string]slog.Value { return logs.with("Cannot subscribe, will retry") }
	g.Eventually(retries, 10*time.Second, 20*time.Millisecond).Should(HaveLen(5))
	got := retries()
	for i, want := range []time.Duration{100, 200, 400, 400, 400} {
		want *= time.Millisecond
		delay := got[i]["retryIn"].Duration()
		g.Expect(delay).To(And(BeNumerically("<=", want), BeNumerically(">=", want*4/5)), "retry %d", i+1)
		g.Expect(got[i]["attempt"].Int64()).To(BeEquivalentTo(i + 1))
		g.Expect(got[i]["error"].String()).NotTo(BeEmpty())
		if i > 0 {
			// The next failure comes after the wait and another attempt.
			gap := got[i]["time"].Time().Sub(got[i-1]["time"].Time())
			g.Expect(gap).To(BeNumerically(">=", got[i-1]["retryIn"].Duration()), "gap before retry %d", i+1)
		}
	}
	g.Expect(ready(c)).To(Equal(http.StatusServiceUnavailable))

	// Stopping between attempts or during one returns nil. (That a stop
	// does not wait for the client's 30 s operation timeout is the
	// SIGTERM test of cmd/pulsar-consumer.)
	cancel()
	g.Eventually(done, time.Second).Should(Receive(BeNil()))
	g.Expect(logs.with("Stopped before subscribing")).To(HaveLen(1))
}
