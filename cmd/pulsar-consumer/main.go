// Command pulsar-consumer subscribes to an Apache Pulsar topic and logs
// every message it receives, acknowledging it. It is what a
// PulsarConsumer's Deployment runs, configured only from the environment
// the PulsarConsumer controller sets: PULSAR_SERVER_ADDRESS, PULSAR_TOPIC,
// PULSAR_SUBSCRIPTION, PULSAR_SUBSCRIPTION_TYPE, PULSAR_CONSUMER_NAME and
// PULSAR_CONSUMER_HEALTH_ADDRESS. SIGTERM closes the consumer and the
// client, and it exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kubext/kubext/internal/pulsarconsumer"
	"github.com/kubext/kubext/internal/version"
)

func main() {
	// Configured from the environment only; the one flag is --version.
	fs := flag.NewFlagSet("pulsar-consumer", flag.ExitOnError)
	// ExitOnError: Parse exits on a bad flag itself.
	if printed, _ := version.Parse(fs, os.Args[1:], os.Stdout); printed {
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, log); err != nil {
		log.Error("Consumer failed", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger) error {
	cfg, err := pulsarconsumer.ConfigFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	c := &pulsarconsumer.Consumer{Config: cfg, Log: log}
	if cfg.HealthAddress != "" {
		// Listen before consuming, so that a taken port fails the start
		// rather than leaving a pod that is never ready.
		l, err := net.Listen("tcp", cfg.HealthAddress)
		if err != nil {
			return fmt.Errorf("serving health checks: %w", err)
		}
		srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				log.Error("Health server failed", "error", err)
			}
		}()
		defer func() {
			shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdownCtx)
		}()
		log.Info("Serving /readyz, /healthz and /metrics", "address", l.Addr().String())
	}
	log.Info("Starting", "server", cfg.ServerAddress, "topic", cfg.Topic, "subscription", cfg.Subscription,
		"type", cfg.SubscriptionType, "consumer", cfg.ConsumerName)
	return c.Run(ctx)
}
