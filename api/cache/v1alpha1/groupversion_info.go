// Package v1alpha1 holds the cache.kubext.io/v1alpha1 API: Redis, a
// replicated Redis (one primary, the other members replicas of it) that
// kubext runs as a StatefulSet and keeps replicating.
//
// +kubebuilder:object:generate=true
// +groupName=cache.kubext.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of the types in this package.
	GroupVersion = schema.GroupVersion{Group: "cache.kubext.io", Version: "v1alpha1"}
	// SchemeBuilder registers the types in this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types in this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Redis{}, &RedisList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
