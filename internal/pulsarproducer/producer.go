// Package pulsarproducer is the seed's sample producer: it publishes one
// message to an Apache Pulsar topic and returns once the broker has stored
// it, so that a PulsarConsumer's pods have something to log. It is
// configured exactly as the seed runs it:
//
//	env PULSAR_SERVER=pulsar://localhost:6650 env PULSAR_MESSAGE="Sample Message" env PULSAR_TOPIC="my-topic" pulsar-producer
package pulsarproducer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
)

// The environment the seed sets. They differ from the consumer's
// (api/pulsar/v1): the seed's producer predates the PulsarConsumer API and
// its command line is what users copy.
const (
	EnvServer  = "PULSAR_SERVER"
	EnvTopic   = "PULSAR_TOPIC"
	EnvMessage = "PULSAR_MESSAGE"
)

// Config is the whole configuration of one send.
type Config struct {
	// Server is the broker's service URL, pulsar://host:6650 or
	// pulsar+ssl://host:6651.
	Server string
	// Topic is the topic the message goes to.
	Topic string
	// Message is the payload, sent as is; it may be empty only if the
	// variable is set (an empty message is a message).
	Message string
	// Timeout bounds the whole send, connection included: a broker that
	// is down fails the command instead of hanging it.
	Timeout time.Duration
}

// ConfigFromEnv reads the configuration through lookup (os.LookupEnv). The
// error names every variable that is missing or wrong, so one run shows all
// there is to fix.
func ConfigFromEnv(lookup func(string) (string, bool)) (Config, error) {
	var errs []error
	server, _ := lookup(EnvServer)
	server = strings.TrimSpace(server)
	switch {
	case server == "":
		errs = append(errs, fmt.Errorf("%s is not set (the broker's URL, e.g. pulsar://localhost:6650)", EnvServer))
	case !strings.HasPrefix(server, "pulsar://") && !strings.HasPrefix(server, "pulsar+ssl://"):
		errs = append(errs, fmt.Errorf("%s is %q, want a pulsar:// or pulsar+ssl:// URL", EnvServer, server))
	}
	topic, _ := lookup(EnvTopic)
	topic = strings.TrimSpace(topic)
	if topic == "" {
		errs = append(errs, fmt.Errorf("%s is not set (the topic to publish to, e.g. my-topic)", EnvTopic))
	}
	message, ok := lookup(EnvMessage)
	if !ok {
		errs = append(errs, fmt.Errorf("%s is not set (the message to publish)", EnvMessage))
	}
	return Config{Server: server, Topic: topic, Message: message}, errors.Join(errs...)
}

// Sender publishes one message and waits for the broker to store it. Send
// is the real one; tests stand in for the broker here.
type Sender func(ctx context.Context, cfg Config, log *slog.Logger) (pulsar.MessageID, error)

// Send connects with the Apache Pulsar client, creates a producer on the
// topic, sends the message synchronously (it returns once the broker has
// persisted it) and closes everything, within cfg.Timeout.
func Send(ctx context.Context, cfg Config, log *slog.Logger) (pulsar.MessageID, error) {
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	client, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               cfg.Server,
		ConnectionTimeout: cfg.Timeout,
		OperationTimeout:  cfg.Timeout,
		Logger:            pulsarlog.NewLoggerWithSlog(log.With("component", "pulsar-client")),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the Pulsar client for %s: %w", cfg.Server, err)
	}
	defer client.Close()

	// CreateProducer takes no context and retries until the operation
	// timeout: run it aside so that a signal or the deadline ends the
	// command at once.
	type created struct {
		producer pulsar.Producer
		err      error
	}
	done := make(chan created, 1)
	go func() {
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: cfg.Topic, SendTimeout: cfg.Timeout})
		done <- created{p, err}
	}()
	var producer pulsar.Producer
	select {
	case c := <-done:
		if c.err != nil {
			return nil, fmt.Errorf("creating a producer on topic %s at %s: %w", cfg.Topic, cfg.Server, c.err)
		}
		producer = c.producer
	case <-ctx.Done():
		go func() {
			if c := <-done; c.err == nil {
				c.producer.Close()
			}
		}()
		return nil, fmt.Errorf("creating a producer on topic %s at %s: %w", cfg.Topic, cfg.Server, ctx.Err())
	}
	defer producer.Close()
	id, err := producer.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(cfg.Message)})
	if err != nil {
		return nil, fmt.Errorf("sending to topic %s at %s: %w", cfg.Topic, cfg.Server, err)
	}
	return id, nil
}

// Run sends cfg's message with send (Send when nil) and logs the outcome.
func Run(ctx context.Context, cfg Config, log *slog.Logger, send Sender) error {
	if send == nil {
		send = Send
	}
	log.Info("Sending", "server", cfg.Server, "topic", cfg.Topic, "bytes", len(cfg.Message))
	id, err := send(ctx, cfg, log)
	if err != nil {
		return err
	}
	log.Info("Sent", "topic", cfg.Topic, "id", id.String())
	return nil
}
