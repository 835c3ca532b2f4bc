// Command pulsar-producer is the seed's sample producer: it publishes
// PULSAR_MESSAGE to PULSAR_TOPIC on the broker at PULSAR_SERVER, waits for
// the broker to store it, prints its message ID and exits 0; it exits 1,
// saying why, when the configuration is wrong or the broker does not take
// the message within --timeout.
//
//	env PULSAR_SERVER=pulsar://localhost:6650 env PULSAR_MESSAGE="Sample Message" env PULSAR_TOPIC="my-topic" pulsar-producer
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kubext/kubext/internal/pulsarproducer"
	"github.com/kubext/kubext/internal/version"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], log); err != nil {
		log.Error("Producer failed", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("pulsar-producer", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: env %s=pulsar://host:6650 %s=my-topic %s=\"Sample Message\" pulsar-producer [flags]\n",
			pulsarproducer.EnvServer, pulsarproducer.EnvTopic, pulsarproducer.EnvMessage)
		fs.PrintDefaults()
	}
	timeout := fs.Duration("timeout", 30*time.Second, "How long to wait for the broker to take the message, connection included.")
	if printed, err := version.Parse(fs, args, os.Stdout); err != nil || printed {
		return err
	}
	if *timeout <= 0 {
		return fmt.Errorf("--timeout is %s, want a positive duration", *timeout)
	}
	cfg, err := pulsarproducer.ConfigFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	cfg.Timeout = *timeout
	return pulsarproducer.Run(ctx, cfg, log, nil)
}
