package v1

// The environment of the pulsar-consumer program: the whole of its
// configuration, which the PulsarConsumer controller sets on the
// Deployment's container and the program reads. Both sides use these names.
const (
	// EnvServerAddress is spec.serverAddress, the broker's service URL.
	EnvServerAddress = "PULSAR_SERVER_ADDRESS"
	// EnvTopic is spec.topic.
	EnvTopic = "PULSAR_TOPIC"
	// EnvSubscription is spec.subscriptionName.
	EnvSubscription = "PULSAR_SUBSCRIPTION"
	// EnvSubscriptionType is spec.subscriptionType: Exclusive, Shared,
	// Failover or KeyShared.
	EnvSubscriptionType = "PULSAR_SUBSCRIPTION_TYPE"
	// EnvConsumerName names the consumer to the broker (topic stats show
	// it); the controller sets it to the pod's name.
	EnvConsumerName = "PULSAR_CONSUMER_NAME"
	// EnvHealthAddress is the address the program serves /readyz (200 once
	// subscribed), /healthz and /metrics on, e.g. ":8080"; unset, it
	// serves none.
	EnvHealthAddress = "PULSAR_CONSUMER_HEALTH_ADDRESS"
)
