package cachetrim

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

var managed = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}

// What the manager's controllers read of a Pod is kept; the rest goes.
func TestPodKeepsWhatTheControllersRead(t *testing.T) {
	g := NewWithT(t)
	now := metav1.Now()
	meta := metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: types.UID("u"), ResourceVersion: "7", Generation: 2,
		CreationTimestamp: now, DeletionTimestamp: &now,
		Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"ip.kubext.io/ip": "ip-1"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: "redis"}}, Finalizers: []string{"f"}}
	status := corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "10.0.0.1", PodIP: "10.1.0.1",
		PodIPs: []corev1.PodIP{{IP: "10.1.0.1"}}, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	in := &corev1.Pod{ObjectMeta: meta, Spec: corev1.PodSpec{NodeName: "n1", HostNetwork: true,
		Containers: []corev1.Container{{Name: "c", Image: "i", Env: []corev1.EnvVar{{Name: "A", Value: "B"}}}},
		Volumes:    []corev1.Volume{{Name: "v"}}}, Status: status}
	in.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Image: "i"}}
	in.ManagedFields = managed

	out, err := Pod(in)
	g.Expect(err).NotTo(HaveOccurred())
	p := out.(*corev1.Pod)
	g.Expect(p.ObjectMeta).To(Equal(meta), "all metadata but managedFields")
	g.Expect(p.Spec).To(Equal(corev1.PodSpec{NodeName: "n1", HostNetwork: true}))
	g.Expect(p.Status).To(Equal(status))
	g.Expect(in.Spec.Containers).To(HaveLen(1), "the informer's object is not changed")

	other, err := Pod("not a pod")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other).To(Equal("not a pod"))
}

// What the manager's controllers read of a Node is kept; images, capacity
// and volumes go.
func TestNodeKeepsWhatTheControllersRead(t *testing.T) {
	g := NewWithT(t)
	meta := metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"pool": "edge"}, Annotations: map[string]string{"reboot": "x"}}
	spec := corev1.NodeSpec{PodCIDR: "10.1.0.0/24", PodCIDRs: []string{"10.1.0.0/24"}, ProviderID: "aws:///i-1", Unschedulable: true,
		Taints: []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}}
	status := corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
		NodeInfo:   corev1.NodeSystemInfo{BootID: "boot-1"},
	}
	in := &corev1.Node{ObjectMeta: meta, Spec: spec, Status: status}
	in.ManagedFields = managed
	in.Status.Images = []corev1.ContainerImage{{Names: []string{"registry/image@sha256:..."}, SizeBytes: 1 << 30}}
	in.Status.VolumesInUse = []corev1.UniqueVolumeName{"v"}

	out, err := Node(in)
	g.Expect(err).NotTo(HaveOccurred())
	n := out.(*corev1.Node)
	g.Expect(n.ObjectMeta).To(Equal(meta))
	g.Expect(n.Spec).To(Equal(spec))
	g.Expect(n.Status).To(Equal(status))
}

// The manager caches IPs and IPAddresses (ten thousand each in a large
// pool) without managedFields, keeps everything else of them, and keeps
// the managedFields of other kinds (internal/ownedapply reads them).
func TestIPsAndReservationsLoseOnlyManagedFields(t *testing.T) {
	g := NewWithT(t)
	transform := Options("kubext-system").DefaultTransform
	g.Expect(transform).NotTo(BeNil())
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "ip-1", ResourceVersion: "3", Finalizers: []string{"ip.kubext.io/finalizer"},
		ManagedFields: managed}, Status: ipv1.IPStatus{Address: "192.0.2.10", AttachedNode: "n1"}}
	addr := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "192.0.2.10", Labels: map[string]string{ipv1.LabelPool: "p"},
		ManagedFields: managed}, Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "ips", Name: "ip-1"}}}
	for _, obj := range []runtime.Object{ip, addr} {
		want := obj.DeepCopyObject()
		want.(metav1.Object).SetManagedFields(nil)
		out, err := transform(obj.DeepCopyObject())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(Equal(want), fmt.Sprintf("%T", obj))
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owned", ManagedFields: managed}}
	out, err := transform(cm.DeepCopy())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal(cm), "another kind keeps its managedFields")
}
