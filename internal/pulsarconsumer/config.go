// Package pulsarconsumer is the pulsar-consumer program that a
// PulsarConsumer's Deployment runs: it subscribes to one Apache Pulsar
// topic, logs every message it receives and acknowledges it, retries the
// broker with a capped exponential backoff while it cannot subscribe, and
// closes the consumer and the client when told to stop.
package pulsarconsumer

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
)

// Config is the consumer's whole configuration, read from the environment
// the PulsarConsumer controller sets (the names are in api/pulsar/v1).
type Config struct {
	// ServerAddress is the broker's service URL, pulsar://host:6650.
	ServerAddress string
	// Topic is the topic to consume.
	Topic string
	// Subscription names the subscription.
	Subscription string
	// SubscriptionType is how the subscription shares messages among its
	// consumers.
	SubscriptionType pulsarv1.SubscriptionType
	// ConsumerName names this consumer to the broker; empty lets the client
	// make one up.
	ConsumerName string
	// HealthAddress is where /readyz, /healthz and /metrics are served;
	// empty serves none.
	HealthAddress string
	// OperationTimeout is how long one attempt to subscribe retries the
	// broker before the backoff takes over; 0 is the client's default,
	// 30 s. Not read from the environment.
	OperationTimeout time.Duration
}

var subscriptionTypes = map[pulsarv1.SubscriptionType]pulsar.SubscriptionType{
	pulsarv1.SubscriptionExclusive: pulsar.Exclusive,
	pulsarv1.SubscriptionShared:    pulsar.Shared,
	pulsarv1.SubscriptionFailover:  pulsar.Failover,
	pulsarv1.SubscriptionKeyShared: pulsar.KeyShared,
}

// ConfigFromEnv reads the configuration through lookup (os.LookupEnv). The
// subscription type defaults to Shared, as in the PulsarConsumer API. The
// error names every variable that is missing or wrong.
func ConfigFromEnv(lookup func(string) (string, bool)) (Config, error) {
	get := func(name string) string {
		v, _ := lookup(name)
		return strings.TrimSpace(v)
	}
	cfg := Config{
		ServerAddress:    get(pulsarv1.EnvServerAddress),
		Topic:            get(pulsarv1.EnvTopic),
		Subscription:     get(pulsarv1.EnvSubscription),
		SubscriptionType: pulsarv1.SubscriptionShared,
		ConsumerName:     get(pulsarv1.EnvConsumerName),
		HealthAddress:    get(pulsarv1.EnvHealthAddress),
	}
	var errs []error
	for _, required := range []struct{ name, value string }{
		{pulsarv1.EnvServerAddress, cfg.ServerAddress},
		{pulsarv1.EnvTopic, cfg.Topic},
		{pulsarv1.EnvSubscription, cfg.Subscription},
	} {
		if required.value == "" {
			errs = append(errs, fmt.Errorf("%s is not set", required.name))
		}
	}
	if t := get(pulsarv1.EnvSubscriptionType); t != "" {
		cfg.SubscriptionType = pulsarv1.SubscriptionType(t)
		if _, ok := subscriptionTypes[cfg.SubscriptionType]; !ok {
			errs = append(errs, fmt.Errorf("%s is %q, want Exclusive, Shared, Failover or KeyShared", pulsarv1.EnvSubscriptionType, t))
		}
	}
	return cfg, errors.Join(errs...)
}
