package pulsarconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Backoff is a capped exponential backoff.
type Backoff struct {
	// Initial is the wait before the first retry.
	Initial time.Duration
	// Max caps the wait.
	Max time.Duration
}

// DefaultBackoff waits 1 s before the first retry, then twice as long each
// time, up to 30 s.
var DefaultBackoff = Backoff{Initial: time.Second, Max: 30 * time.Second}

// delays returns the waits before each retry, one per call: Initial·2ⁿ
// capped at Max (client-go's wait.Backoff), less up to a fifth at random,
// so that consumers that lost the broker together do not all come back at
// the same instant. (wait.Backoff's own jitter adds to the wait, which would
// overshoot Max.)
func (b Backoff) delays() func() time.Duration {
	w := wait.Backoff{Duration: min(b.Initial, b.Max), Factor: 2, Cap: b.Max, Steps: math.MaxInt32}
	return func() time.Duration {
		d := w.Step()
		return d - time.Duration(rand.Int64N(int64(d)/5+1))
	}
}

// Subscriber connects to the broker and subscribes to the topic. The
// client and consumer it returns are closed by the caller.
type Subscriber func(ctx context.Context, cfg Config, log *slog.Logger) (pulsar.Client, pulsar.Consumer, error)

// Consumer subscribes to a topic, logs and acknowledges every message, and
// subscribes again, after a backoff, whenever it cannot.
type Consumer struct {
	Config Config
	// Backoff is DefaultBackoff when zero.
	Backoff Backoff
	Log     *slog.Logger
	// Subscribe is Subscribe when nil; tests stand in for the broker here.
	Subscribe Subscriber

	subscribed atomic.Bool
}

// errConfig marks an error that retrying cannot fix.
var errConfig = errors.New("invalid configuration")

// Run consumes until ctx ends, then closes the consumer and the client and
// returns nil. It returns an error only for a configuration the client
// refuses.
func (c *Consumer) Run(ctx context.Context) error {
	subscribe, backoff := c.Subscribe, c.Backoff
	if subscribe == nil {
		subscribe = Subscribe
	}
	if backoff == (Backoff{}) {
		backoff = DefaultBackoff
	}
	nextDelay := backoff.delays()
	for attempt := 0; ; {
		client, consumer, err := subscribe(ctx, c.Config, c.Log)
		if errors.Is(err, errConfig) {
			return err
		}
		if err != nil {
			if ctx.Err() != nil {
				c.Log.Info("Stopped before subscribing")
				return nil
			}
			delay := nextDelay()
			attempt++
			c.Log.Warn("Cannot subscribe, will retry", "server", c.Config.ServerAddress, "topic", c.Config.Topic,
				"attempt", attempt, "retryIn", delay, "error", err)
			if !sleep(ctx, delay) {
				c.Log.Info("Stopped before subscribing")
				return nil
			}
			continue
		}
		attempt, nextDelay = 0, backoff.delays()
		c.subscribed.Store(true)
		c.Log.Info("Subscribed", "server", c.Config.ServerAddress, "topic", c.Config.Topic,
			"subscription", consumer.Subscription(), "consumer", consumer.Name())
		err = Consume(ctx, consumer, c.Log)
		c.subscribed.Store(false)
		consumer.Close()
		client.Close()
		if err == nil {
			c.Log.Info("Stopped: consumer and client closed")
			return nil
		}
		c.Log.Warn("Receiving failed, will subscribe again", "error", err)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Subscribed reports whether the consumer is attached to its
// subscription.
func (c *Consumer) Subscribed() bool { return c.subscribed.Load() }

// Handler serves /readyz (200 while subscribed, 503 otherwise: the pod's
// readiness), /healthz, and the client's Prometheus metrics on /metrics.
func (c *Consumer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !c.Subscribed() {
			http.Error(w, "not subscribed", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "subscribed")
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("GET /metrics", promhttp.Handler())
	return mux
}

// Subscribe connects to the broker with the Apache Pulsar client and
// subscribes. Once subscribed, the client itself reconnects the consumer
// whenever the connection drops; what needs a backoff around it is the
// first subscription.
func Subscribe(ctx context.Context, cfg Config, log *slog.Logger) (pulsar.Client, pulsar.Consumer, error) {
	client, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:              cfg.ServerAddress,
		OperationTimeout: cfg.OperationTimeout,
		Logger:           pulsarlog.NewLoggerWithSlog(log.With("component", "pulsar-client")),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	type subscribed struct {
		consumer pulsar.Consumer
		err      error
	}
	done := make(chan subscribed, 1)
	go func() {
		consumer, err := client.Subscribe(pulsar.ConsumerOptions{
			Topic:            cfg.Topic,
			SubscriptionName: cfg.Subscription,
			Type:             subscriptionTypes[cfg.SubscriptionType],
			Name:             cfg.ConsumerName,
		})
		done <- subscribed{consumer, err}
	}()
	select {
	case s := <-done:
		if s.err != nil {
			client.Close()
			return nil, nil, s.err
		}
		return client, s.consumer, nil
	case <-ctx.Done():
		// Subscribe takes no context: it retries until the client's
		// operation timeout (30 s), and closing the client does not cut it
		// short. Stop now; it closes what it made when it returns.
		go func() {
			if s := <-done; s.err == nil {
				s.consumer.Close()
			}
			client.Close()
		}()
		return nil, nil, ctx.Err()
	}
}

// maxLoggedPayload bounds how much of a message is logged.
const maxLoggedPayload = 4096

// Consume logs every message the consumer receives and acknowledges it,
// until ctx ends (it returns nil) or receiving fails (it returns the
// error).
func Consume(ctx context.Context, consumer pulsar.Consumer, log *slog.Logger) error {
	for {
		msg, err := consumer.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		payload := msg.Payload()
		logged := payload[:min(len(payload), maxLoggedPayload)]
		log.Info("Received message", "topic", msg.Topic(), "id", msg.ID().String(), "key", msg.Key(),
			"publishTime", msg.PublishTime(), "redeliveries", msg.RedeliveryCount(),
			"bytes", len(payload), "content", string(logged))
		if err := consumer.Ack(msg); err != nil {
			// Unacknowledged, the message comes again (to this consumer or
			// another of the subscription): it is not lost.
			log.Warn("Cannot acknowledge message; the broker will deliver it again", "id", msg.ID().String(), "error", err)
		}
	}
}
