// Package v1 holds the stable.example.com/v1 API: CronTab, the example
// CustomResourceDefinition of the Kubernetes documentation, which kubext
// runs as a batch/v1 CronJob.
//
// +kubebuilder:object:generate=true
// +groupName=stable.example.com
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of the types in this package.
	GroupVersion = schema.GroupVersion{Group: "stable.example.com", Version: "v1"}

	// SchemeBuilder registers the types in this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types in this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &CronTab{}, &CronTabList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
