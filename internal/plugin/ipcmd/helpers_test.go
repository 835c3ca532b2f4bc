package ipcmd

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// now is the fixed clock of the unit tests.
var now = time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

func cond(t, status, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionStatus(status), Reason: reason, Message: msg, LastTransitionTime: ago(time.Minute)}
}

// readyIP is IP "web" at 192.0.2.10 held by default/web-0 on n1, with the
// given standbys.
func readyIP(standbys ...string) *ipv1.IP {
	return &ipv1.IP{
		ObjectMeta: metav1.ObjectMeta{Name: "web", CreationTimestamp: ago(time.Hour), Generation: 1},
		Spec:       ipv1.IPSpec{Pool: "lab", Claimants: &ipv1.IPClaimants{Namespaces: []string{"default"}}},
		Status: ipv1.IPStatus{
			Address: "192.0.2.10", Pool: "lab", Assigned: true, Claimed: true,
			Node: "n1", AttachedNode: "n1", AttachedPod: "default/web-0", Pod: "default/web-0", Standbys: standbys,
			ObservedGeneration: 1,
			Conditions: []metav1.Condition{
				cond(ipv1.ConditionAllocated, "True", ipv1.ReasonAddressAllocated, "192.0.2.10 is reserved"),
				cond(ipv1.ConditionAttached, "True", ipv1.ReasonAgentConfirmed, "the agent on n1 answers for 192.0.2.10"),
				cond(ipv1.ConditionReady, "True", ipv1.ReasonReady, "192.0.2.10 answers on node n1 for pod default/web-0"),
			},
		},
	}
}

// notReady sets the IP's Attached and Ready conditions to False.
func notReady(ip *ipv1.IP, reason, msg string) *ipv1.IP {
	ip.Status.Conditions = []metav1.Condition{
		cond(ipv1.ConditionAllocated, "True", ipv1.ReasonAddressAllocated, "192.0.2.10 is reserved"),
		cond(ipv1.ConditionAttached, "False", reason, msg),
		cond(ipv1.ConditionReady, "False", reason, msg),
	}
	return ip
}

// pod is a claimant of IP "web" in namespace default.
func pod(name, node string, ready bool) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Annotations: map[string]string{ipv1.AnnotationIP: "web"}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	if ready {
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.1"
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	return p
}

// lease is node's agent Lease, last renewed age ago, lasting 5s.
func lease(node string, age time.Duration) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubext-system", Name: leaseName(node)},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(node),
			LeaseDurationSeconds: ptr.To[int32](5),
			RenewTime:            &metav1.MicroTime{Time: now.Add(-age)},
		},
	}
}

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

func event(typ, reason, note string, age time.Duration) eventsv1.Event {
	return eventsv1.Event{Type: typ, Reason: reason, Note: note, EventTime: metav1.NewMicroTime(now.Add(-age))}
}
