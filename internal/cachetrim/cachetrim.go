// Package cachetrim keeps, of the objects the manager caches by the
// thousand (Pods and Nodes, every one of the cluster), only the fields its
// controllers read, without managedFields. At
// 10,000 pods and 1,000 nodes that is most of the manager's memory: a
// node's status.images alone is often larger than all that is kept of it.
// (Not every kind: see Options.)
//
// Whoever makes a controller of the manager read another field of a cached
// Pod or Node adds it here (the tests list what is kept). Writes are not
// affected as long as they are patches computed from two versions of the
// same trimmed object (client.MergeFrom), which is the rule in this
// repository; an Update of a trimmed object would drop what was trimmed.
package cachetrim

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// Options are the manager's cache options: trimmed Pods and Nodes, of the
// Leases only those of the agents' namespace (their heartbeats), not every
// Lease of the cluster, without managedFields, and IPs and IPAddresses
// without managedFields.
//
// managedFields stay on every other kind: the objects the controllers own
// are compared with what they want through them (internal/ownedapply reads
// the fields its field manager owns), so stripping them would turn every
// reconcile into a write.
func Options(heartbeatNamespace string) cache.Options {
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:  {Transform: Pod},
			&corev1.Node{}: {Transform: Node},
			&coordinationv1.Lease{}: {
				Namespaces: map[string]cache.Config{heartbeatNamespace: {}},
				Transform:  cache.TransformStripManagedFields(),
			},
		},
		// IPs and their reservations, also by the ten thousand, are
		// written only by patches and creates: nothing reads their
		// managedFields. A default transform rather than ByObject
		// entries: those are resolved when the cache is made, which fails
		// in a manager without the IP API (the Redis controller's tests)
		// or without its CRD installed.
		DefaultTransform: ipsWithoutManagedFields,
	}
}

// ipsWithoutManagedFields strips managedFields from IPs and IPAddresses
// and leaves every other kind as it is.
func ipsWithoutManagedFields(obj any) (any, error) {
	switch o := obj.(type) {
	case *ipv1.IP:
		o.ManagedFields = nil
	case *networkingv1.IPAddress:
		o.ManagedFields = nil
	}
	return obj, nil
}

// meta is m without managedFields.
func meta(m metav1.ObjectMeta) metav1.ObjectMeta {
	m.ManagedFields = nil
	return m
}

// Pod keeps of a pod its metadata (labels, annotations such as the IP
// claim, owners, deletion), where it runs and on which network (the IP
// controller's claimants, the Redis controller's members), and its phase,
// conditions (Ready) and addresses. Its containers, volumes and container
// statuses go.
func Pod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		TypeMeta:   p.TypeMeta,
		ObjectMeta: meta(p.ObjectMeta),
		Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{
			Phase:      p.Status.Phase,
			Conditions: p.Status.Conditions,
			HostIP:     p.Status.HostIP,
			PodIP:      p.Status.PodIP,
			PodIPs:     p.Status.PodIPs,
		},
	}, nil
}

// Node keeps of a node its metadata (labels for the pools' nodeSelectors,
// annotations for the reboot controller), its spec (pod ranges, provider
// ID, taints, cordon) and of its status the conditions (Ready), addresses
// and node info (boot ID). Images, capacity and volumes go.
func Node(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		TypeMeta:   n.TypeMeta,
		ObjectMeta: meta(n.ObjectMeta),
		Spec:       n.Spec,
		Status: corev1.NodeStatus{
			Conditions: n.Status.Conditions,
			Addresses:  n.Status.Addresses,
			NodeInfo:   n.Status.NodeInfo,
		},
	}, nil
}
