package pulsarconsumer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
	"github.com/kubext/kubext/test/lab"
)

// create asks the API server to create a PulsarConsumer without keeping it.
func create(t *testing.T, name string, s pulsarv1.PulsarConsumerSpec) error {
	pc := &pulsarv1.PulsarConsumer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: s}
	return k8s.Create(t.Context(), pc, client.DryRunAll)
}

func TestServerAddressValidation(t *testing.T) {
	valid := []string{
		"pulsar://localhost:6650",
		"pulsar://pulsar-broker.pulsar.svc.cluster.local:6650",
		"pulsar://pulsar-broker", // the client adds the default port
		"pulsar+ssl://broker.example.com:6651/",
		"pulsar://10.0.0.7:6650",
		"pulsar://[fd00::7]:6650",
		"pulsar://broker-1:6650,broker-2:6650,10.0.0.9:6650",
		"pulsar://b:1", "pulsar://b:65535",
	}
	for _, addr := range valid {
		t.Run(addr, func(t *testing.T) {
			s := spec("orders", 1)
			s.ServerAddress = addr
			NewWithT(t).Expect(create(t, "valid", s)).To(Succeed())
		})
	}

	invalid := []struct{ addr, message string }{
		{"", "spec.serverAddress"},
		{"localhost:6650", "serverAddress must start with pulsar://"},
		{"http://pulsar-admin:8080", "serverAddress must start with pulsar://"},
		{"pulsar+tls://broker:6651", "serverAddress must start with pulsar://"},
		{"pulsar://", "serverAddress must be pulsar://host:port"},
		{"pulsar://broker:6650/admin", "serverAddress must be pulsar://host:port"},
		{"pulsar://user@broker:6650", "serverAddress must be pulsar://host:port"},
		{"pulsar://broker:6650?x=1", "serverAddress must be pulsar://host:port"},
		{"pulsar://-broker:6650", "serverAddress must be pulsar://host:port"},
		{"pulsar://broker:6650,", "serverAddress must be pulsar://host:port"},
		{"pulsar://broker:0", "port from 1 to 65535"},
		{"pulsar://broker:65536", "port from 1 to 65535"},
		{"pulsar://broker:99999", "port from 1 to 65535"},
		{"pulsar://broker :6650", "serverAddress must be pulsar://host:port"},
	}
	for _, tc := range invalid {
		t.Run(tc.addr, func(t *testing.T) {
			s := spec("orders", 1)
			s.ServerAddress = tc.addr
			NewWithT(t).Expect(create(t, "invalid", s)).To(MatchError(ContainSubstring(tc.message)))
		})
	}
}

func TestTopicValidation(t *testing.T) {
	for _, topic := range []string{
		"orders", "my-topic_2", "shop/prod/orders", "shop/eu-west/prod/orders",
		"persistent://public/default/orders", "non-persistent://shop/prod/clicks",
		"persistent://shop/prod/orders-partition-3", "a.b=c:d",
	} {
		t.Run(topic, func(t *testing.T) {
			NewWithT(t).Expect(create(t, "valid", spec(topic, 1))).To(Succeed())
		})
	}
	for _, topic := range []string{
		"shop/orders", // a namespace without its tenant
		"persistent://orders", "persistent://public/orders", "queue://public/default/orders",
		"orders/", "/orders", "shop//orders", "my topic", "a/b/c/d/e",
	} {
		t.Run(topic, func(t *testing.T) {
			NewWithT(t).Expect(create(t, "invalid", spec(topic, 1))).To(MatchError(ContainSubstring("topic must be a Pulsar topic name")))
		})
	}
}

func TestSpecValidation(t *testing.T) {
	withType := func(typ pulsarv1.SubscriptionType, replicas int32) pulsarv1.PulsarConsumerSpec {
		s := spec("orders", replicas)
		s.SubscriptionType = typ
		return s
	}
	limited := func(requests, limits string) pulsarv1.PulsarConsumerSpec {
		s := spec("orders", 1)
		s.Resources = &pulsarv1.Resources{
			Requests: map[corev1.ResourceName]resource.Quantity{corev1.ResourceMemory: resource.MustParse(requests)},
			Limits:   map[corev1.ResourceName]resource.Quantity{corev1.ResourceMemory: resource.MustParse(limits)},
		}
		return s
	}
	for name, s := range map[string]pulsarv1.PulsarConsumerSpec{
		"exclusive, one":    withType(pulsarv1.SubscriptionExclusive, 1),
		"exclusive, none":   withType(pulsarv1.SubscriptionExclusive, 0),
		"failover, several": withType(pulsarv1.SubscriptionFailover, 3),
		"key shared":        withType(pulsarv1.SubscriptionKeyShared, 5),
		"zero replicas":     spec("orders", 0),
		"requests = limits": limited("128Mi", "0.125Gi"),
		"image":             {ServerAddress: "pulsar://b:6650", Topic: "t", SubscriptionName: "s", Image: "mirror.example.com/kubext@sha256:" + strings.Repeat("ab", 32)},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(create(t, "valid", s)).To(Succeed())
		})
	}

	for name, tc := range map[string]struct {
		name    string
		spec    pulsarv1.PulsarConsumerSpec
		message string
	}{
		"no topic":             {spec: pulsarv1.PulsarConsumerSpec{ServerAddress: "pulsar://b:6650", SubscriptionName: "s"}, message: "spec.topic"},
		"no subscription":      {spec: pulsarv1.PulsarConsumerSpec{ServerAddress: "pulsar://b:6650", Topic: "t"}, message: "spec.subscriptionName"},
		"spaced subscription":  {spec: pulsarv1.PulsarConsumerSpec{ServerAddress: "pulsar://b:6650", Topic: "t", SubscriptionName: "my sub"}, message: "subscriptionName must not contain spaces"},
		"negative replicas":    {spec: spec("orders", -1), message: "spec.replicas"},
		"exclusive, several":   {spec: withType(pulsarv1.SubscriptionExclusive, 2), message: "an Exclusive subscription admits one consumer"},
		"unknown type":         {spec: withType("Broadcast", 1), message: "spec.subscriptionType"},
		"spaced image":         {spec: pulsarv1.PulsarConsumerSpec{ServerAddress: "pulsar://b:6650", Topic: "t", SubscriptionName: "s", Image: "app 1.0"}, message: "image must not contain whitespace"},
		"requests over limits": {spec: limited("256Mi", "128Mi"), message: "resources.requests must not exceed resources.limits"},
		"long name":            {name: strings.Repeat("n", 64), spec: spec("orders", 1), message: "metadata.name must be at most 63 characters"},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.name == "" {
				tc.name = "invalid"
			}
			NewWithT(t).Expect(create(t, tc.name, tc.spec)).To(MatchError(ContainSubstring(tc.message)))
		})
	}
}

// `kubectl scale` goes through the same validation: an Exclusive
// subscription cannot be scaled past one consumer.
func TestScaleIsValidated(t *testing.T) {
	f := newFixture(t)
	s := spec("orders", 1)
	s.SubscriptionType = pulsarv1.SubscriptionExclusive
	key := f.consumer("exclusive", s)
	pc := f.Get(key, &pulsarv1.PulsarConsumer{}).(*pulsarv1.PulsarConsumer)

	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 2}}
	f.G.Expect(k8s.SubResource("scale").Update(f.Ctx, pc, client.WithSubResourceBody(scale))).
		To(MatchError(ContainSubstring("an Exclusive subscription admits one consumer")))
	f.G.Expect(f.Get(key, &pulsarv1.PulsarConsumer{}).(*pulsarv1.PulsarConsumer).Spec.Replicas).To(Equal(ptr.To(int32(1))))
}

func TestSampleIsValid(t *testing.T) {
	g := NewWithT(t)
	root, err := lab.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	data, err := os.ReadFile(filepath.Join(root, "config", "samples", "pulsar_v1_pulsarconsumer.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	pc := &pulsarv1.PulsarConsumer{}
	g.Expect(yaml.UnmarshalStrict(data, pc)).To(Succeed())
	pc.Namespace = ns
	g.Expect(k8s.Create(t.Context(), pc, client.DryRunAll)).To(Succeed())
}
