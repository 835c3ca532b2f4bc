package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelConsumer is set on the Deployment and its pods; its value is the
// name of the PulsarConsumer they run for. It is the Deployment's selector.
const LabelConsumer = "pulsar.kubext.io/consumer"

// Conditions of a PulsarConsumer, after the Deployment's own.
const (
	// ConditionAvailable is the Deployment's Available condition: True when
	// every requested consumer has been ready (subscribed to the topic)
	// for the Deployment's minReadySeconds.
	ConditionAvailable = "Available"
	// ConditionProgressing is True while the Deployment is changing: a
	// rollout to a new spec, or replicas being added or removed. False once
	// it is done, or when the rollout gave up (reason
	// ProgressDeadlineExceeded).
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when the consumers cannot be what the spec
	// asks: the Deployment was refused or cannot create pods, its rollout
	// gave up, or the name is taken. The reason and message say which.
	ConditionDegraded = "Degraded"
)

// Reasons of the conditions set by kubext. The other reasons are the
// Deployment's own (MinimumReplicasAvailable, MinimumReplicasUnavailable,
// NewReplicaSetAvailable, ReplicaSetUpdated, ProgressDeadlineExceeded,
// FailedCreate, ...), copied with its message.
const (
	// ReasonDeploymentPending: the Deployment controller has not reported
	// on the Deployment yet.
	ReasonDeploymentPending = "DeploymentPending"
	// ReasonRolloutPending: the Deployment changed and the Deployment
	// controller has not acted on the change yet.
	ReasonRolloutPending = "RolloutPending"
	// ReasonRolloutComplete: every requested consumer runs the current spec
	// and is available, and no other pod is left.
	ReasonRolloutComplete = "RolloutComplete"
	// ReasonScaling: replicas are being added or removed.
	ReasonScaling = "Scaling"
	// ReasonAsExpected: Degraded is False, nothing is wrong.
	ReasonAsExpected = "AsExpected"
	// ReasonDeploymentRejected: the API server refused the Deployment built
	// from the spec (for instance resources it does not accept); the
	// message quotes it. Fix the spec.
	ReasonDeploymentRejected = "DeploymentRejected"
	// ReasonDeploymentExists: a Deployment of the PulsarConsumer's name
	// exists and is not controlled by it, so kubext leaves it alone. Delete
	// or rename that Deployment, or rename the PulsarConsumer.
	ReasonDeploymentExists = "DeploymentExists"
	// ReasonApplyFailed: writing the Deployment failed for a reason that may
	// pass (the message says which); kubext retries.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonUnspecified stands for the reason of a Deployment condition
	// that has none (one written by hand): a condition needs a reason.
	ReasonUnspecified = "Unspecified"
)

// SubscriptionType is how Pulsar shares a subscription's messages among
// the consumers attached to it.
// +kubebuilder:validation:Enum=Exclusive;Shared;Failover;KeyShared
type SubscriptionType string

const (
	// SubscriptionExclusive admits one consumer; the broker refuses a
	// second.
	SubscriptionExclusive SubscriptionType = "Exclusive"
	// SubscriptionShared deals messages round-robin to every consumer.
	SubscriptionShared SubscriptionType = "Shared"
	// SubscriptionFailover delivers to one consumer (per partition) and
	// keeps the others as standbys.
	SubscriptionFailover SubscriptionType = "Failover"
	// SubscriptionKeyShared deals messages to every consumer, all messages
	// of one key to the same consumer.
	SubscriptionKeyShared SubscriptionType = "KeyShared"
)

// PulsarConsumerSpec is the topic to consume and how many consumers do it.
// +kubebuilder:validation:XValidation:rule="!has(self.subscriptionType) || self.subscriptionType != 'Exclusive' || !has(self.replicas) || self.replicas <= 1",message="an Exclusive subscription admits one consumer: use replicas 0 or 1, or subscriptionType Shared, KeyShared or Failover to run several"
type PulsarConsumerSpec struct {
	// serverAddress is the service URL of the Pulsar cluster, in Pulsar's
	// binary protocol: pulsar://host:6650, or pulsar+ssl://host:6651 for
	// TLS. Several brokers are separated by commas:
	// pulsar://broker-1:6650,broker-2:6650. The HTTP admin URL
	// (http://host:8080) is not accepted.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.startsWith('pulsar://') || self.startsWith('pulsar+ssl://')",message="serverAddress must start with pulsar:// (or pulsar+ssl:// for TLS): the consumer speaks Pulsar's binary protocol, usually on port 6650 (6651 with TLS), not the HTTP admin URL"
	// +kubebuilder:validation:XValidation:rule="!(self.startsWith('pulsar://') || self.startsWith('pulsar+ssl://')) || self.matches('^pulsar([+]ssl)?://([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?([.][A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*|[[][0-9A-Fa-f:.]+[]])(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))?(,([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?([.][A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*|[[][0-9A-Fa-f:.]+[]])(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))?)*/?$')",message="serverAddress must be pulsar://host:port with host a DNS name, an IPv4 address or an [IPv6] address, port from 1 to 65535, and nothing after the port (no path, user or query), e.g. pulsar://pulsar-broker.pulsar:6650; list several brokers as pulsar://host-1:6650,host-2:6650"
	ServerAddress string `json:"serverAddress"`

	// topic is the Pulsar topic to consume: a short name such as my-topic
	// (in the public tenant's default namespace), tenant/namespace/my-topic,
	// or a full name persistent://tenant/namespace/my-topic (or
	// non-persistent://...).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.matches('^((persistent|non-persistent)://[-A-Za-z0-9_.=:]+(/[-A-Za-z0-9_.=:]+){2,3}|[-A-Za-z0-9_.=:]+((/[-A-Za-z0-9_.=:]+){2,3})?)$')",message="topic must be a Pulsar topic name: my-topic (in public/default), tenant/namespace/my-topic, or persistent://tenant/namespace/my-topic (or non-persistent://...), made of letters, digits and - _ . = :"
	Topic string `json:"topic"`

	// subscriptionName names the subscription the consumers attach to. The
	// broker keeps the messages published after the subscription was
	// created until a consumer of it acknowledges them, also while no
	// consumer runs (replicas 0).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:space:][:cntrl:]]')",message="subscriptionName must not contain spaces or control characters"
	SubscriptionName string `json:"subscriptionName"`

	// subscriptionType is how the subscription's messages are shared among
	// the consumers: Shared (the default) deals them round-robin to every
	// replica; KeyShared too, all messages of one key to the same replica;
	// Failover delivers to one replica and keeps the others as hot
	// standbys; Exclusive admits a single consumer, so it needs replicas 0
	// or 1. Changing it restarts the consumers, since the broker changes a
	// subscription's type only while no consumer is attached.
	// +optional
	// +kubebuilder:default=Shared
	SubscriptionType SubscriptionType `json:"subscriptionType,omitempty"`

	// replicas is the number of consumers, one per pod. 0 stops consuming;
	// the subscription keeps the messages. Defaults to 1; `kubectl scale
	// pulsarconsumer <name> --replicas=N` sets it too.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	Replicas *int32 `json:"replicas,omitempty"`

	// image is the container image the consumers run, which must hold
	// kubext's /pulsar-consumer program and run as a non-root user: a
	// mirror of kubext's image, or another version of it, pinned by tag or
	// digest. By default the image kubext's manager is configured with
	// (its --pulsar-consumer-image flag), a pinned release of kubext.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:space:]]')",message="image must not contain whitespace"
	Image string `json:"image,omitempty"`

	// resources are the compute resources of each consumer's container,
	// as in a pod: requests and limits of cpu, memory, ...
	// +optional
	Resources *Resources `json:"resources,omitempty"`
}

// Resources are the requests and limits of a container.
// +kubebuilder:validation:XValidation:rule="!has(self.limits) || !has(self.requests) || self.requests.all(r, !(r in self.limits) || quantity(string(self.requests[r])).compareTo(quantity(string(self.limits[r]))) <= 0)",message="resources.requests must not exceed resources.limits"
type Resources struct {
	// requests is what the scheduler reserves for each consumer, e.g.
	// {cpu: 100m, memory: 64Mi}.
	// +optional
	// +kubebuilder:validation:MaxProperties=6
	Requests map[corev1.ResourceName]resource.Quantity `json:"requests,omitempty"`
	// limits is the most each consumer may use, e.g. {memory: 128Mi}.
	// +optional
	// +kubebuilder:validation:MaxProperties=6
	Limits map[corev1.ResourceName]resource.Quantity `json:"limits,omitempty"`
}

// PulsarConsumerStatus is what kubext observes on the PulsarConsumer's
// Deployment.
type PulsarConsumerStatus struct {
	// observedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// replicas is the number of consumer pods that exist, as the Deployment
	// reports: it differs from spec.replicas while scaling.
	// +optional
	Replicas int32 `json:"replicas"`

	// readyReplicas is the number of consumers that are ready: subscribed
	// to the topic.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// availableReplicas is the number of consumers ready for at least the
	// Deployment's minReadySeconds.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas"`

	// selector is the label selector of the consumer pods, in the string
	// form `kubectl get pods -l` takes; the scale subresource reports it
	// for autoscalers.
	// +optional
	Selector string `json:"selector,omitempty"`

	// conditions are Available, Progressing and Degraded; see each one's
	// reason and message.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PulsarConsumer consumes one Apache Pulsar topic: kubext runs a Deployment
// of the same name and namespace whose pods each subscribe to the topic,
// log every message they receive and acknowledge it. kubext keeps the
// Deployment matching the spec, puts back whatever is changed on it by
// hand, and reports its state. Deleting the PulsarConsumer deletes the
// Deployment; the subscription stays on the broker.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:path=pulsarconsumers,singular=pulsarconsumer,scope=Namespaced
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name must be at most 63 characters: the consumer pods are labelled with it"
// +kubebuilder:printcolumn:name="Server",type=string,JSONPath=".spec.serverAddress"
// +kubebuilder:printcolumn:name="Topic",type=string,JSONPath=".spec.topic"
// +kubebuilder:printcolumn:name="Subscription",type=string,JSONPath=".spec.subscriptionName"
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=".spec.subscriptionType",priority=1
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=".spec.replicas"
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=".status.readyReplicas"
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=".status.conditions[?(@.type==\"Available\")].status",priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=".status.conditions[?(@.type==\"Available\")].message",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type PulsarConsumer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says which topic to consume and how.
	// +required
	Spec PulsarConsumerSpec `json:"spec"`

	// status is written by kubext from what it observes on the Deployment.
	// +optional
	Status PulsarConsumerStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// PulsarConsumerList is a list of PulsarConsumers.
type PulsarConsumerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PulsarConsumer `json:"items"`
}
