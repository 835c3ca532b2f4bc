package ipagent

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What the informers keep of a pod and a Node is what the agent reads, and
// nothing of the bulk.
func TestSlimObjects(t *testing.T) {
	g := NewWithT(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default", UID: "u1", ResourceVersion: "7",
			Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"big": "..."}},
		Spec: corev1.PodSpec{NodeName: "node-a", HostNetwork: true, Containers: []corev1.Container{{Name: "c", Image: "i"}}},
		Status: corev1.PodStatus{PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}},
			Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "c"}}},
	}
	out, err := slimPod(pod)
	g.Expect(err).NotTo(HaveOccurred())
	slim := out.(*corev1.Pod)
	g.Expect(slim.Name).To(Equal("app"))
	g.Expect(slim.Namespace).To(Equal("default"))
	g.Expect(slim.UID).To(BeEquivalentTo("u1"))
	g.Expect(slim.ResourceVersion).To(Equal("7"))
	g.Expect(slim.Spec.NodeName).To(Equal("node-a"))
	g.Expect(slim.Spec.HostNetwork).To(BeTrue())
	g.Expect(slim.Status.PodIPs).To(Equal(pod.Status.PodIPs))
	g.Expect(slim.Spec.Containers).To(BeEmpty())
	g.Expect(slim.Status.ContainerStatuses).To(BeEmpty())
	g.Expect(slim.Annotations).To(BeEmpty())
	g.Expect(pod.Spec.Containers).To(HaveLen(1), "the informer's input is not changed")

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"pool": "yes"}},
		Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"x"}}}}}
	out, err = slimNode(node)
	g.Expect(err).NotTo(HaveOccurred())
	n := out.(*corev1.Node)
	g.Expect(n.Name).To(Equal("node-a"))
	g.Expect(n.Labels).To(Equal(map[string]string{"pool": "yes"}))
	g.Expect(n.Status.Images).To(BeEmpty())

	// A tombstone passes as it is.
	g.Expect(slimPod("not a pod")).To(Equal("not a pod"))
}
