package ipagent

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The agent's informers keep only what it reads of its node's pods and of
// its Node: a node runs up to a hundred pods or more, each tens of kB
// decoded (containers, volumes, status), and a Node carries its images
// and addresses, none of which the agent looks at. What is kept:

// slimPod keeps of a pod what assignment and warnHostNetwork read: its
// identity, its node, whether it is on the host network, its addresses.
func slimPod(in any) (any, error) {
	p, ok := in.(*corev1.Pod)
	if !ok {
		return in, nil
	}
	return &corev1.Pod{
		TypeMeta:   p.TypeMeta,
		ObjectMeta: identity(&p.ObjectMeta),
		Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status:     corev1.PodStatus{PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}, nil
}

// slimNode keeps of the agent's Node what Duty reads: its labels.
func slimNode(in any) (any, error) {
	n, ok := in.(*corev1.Node)
	if !ok {
		return in, nil
	}
	meta := identity(&n.ObjectMeta)
	meta.Labels = n.Labels
	return &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: meta}, nil
}

// identity is what names an object and its version (an Event's reference
// to it needs no more).
func identity(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp}
}
