// Package v1alpha1 holds the reboot.kubext.io/v1alpha1 API: RebootGroup, a
// set of nodes that kubext reboots in a rolling fashion within one
// unavailability budget, plus the node annotations of the reboot protocol.
//
// +kubebuilder:object:generate=true
// +groupName=reboot.kubext.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of the types in this package.
	GroupVersion = schema.GroupVersion{Group: "reboot.kubext.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types in this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types in this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &RebootGroup{}, &RebootGroupList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
