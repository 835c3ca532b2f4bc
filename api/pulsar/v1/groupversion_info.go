// Package v1 holds the pulsar.kubext.io/v1 API: PulsarConsumer, a consumer
// of one Apache Pulsar topic that kubext runs as a Deployment of the
// pulsar-consumer program.
//
// +kubebuilder:object:generate=true
// +groupName=pulsar.kubext.io
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of the types in this package.
	GroupVersion = schema.GroupVersion{Group: "pulsar.kubext.io", Version: "v1"}
	// SchemeBuilder registers the types in this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types in this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &PulsarConsumer{}, &PulsarConsumerList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
