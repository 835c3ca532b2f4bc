package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/lab/labnet"
)

// podnetDeployment is a Deployment of pause pods, claiming a static IP when
// claim is true.
func podnetDeployment(name string, replicas int32, claim bool) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if claim {
		tmpl.Annotations = map[string]string{ipv1.AnnotationIP: name}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: tmpl,
		},
	}
}

func runningPods(ctx context.Context, g Gomega, cs *kubernetes.Clientset, app string, n int) []corev1.Pod {
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pods.Items).To(HaveLen(n))
	for _, p := range pods.Items {
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), p.Name)
		g.Expect(p.Status.PodIP).NotTo(BeEmpty(), p.Name)
	}
	return pods.Items
}

// Pods that claim a static IP get a network namespace with their pod IP (from
// their node's slice of the lab's pod subnet) behind their node's namespace,
// and a server there that answers with the pod's name; the namespaces go
// when the pods go. Pods that claim nothing get none. The pod network is
// shared with the other tests (StartPodNetwork returns the running one), so
// this test leaves it running; Down stops it.
func TestPodNetServesAnnotatedPods(t *testing.T) {
	rootOnly(t)
	g := NewWithT(t)
	ctx := context.Background()
	cs, err := theLab.Clientset()
	g.Expect(err).NotTo(HaveOccurred())
	pn, err := theLab.StartPodNetwork(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	again, err := theLab.StartPodNetwork(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(BeIdenticalTo(pn), "one pod network per lab")

	for _, d := range []*appsv1.Deployment{podnetDeployment("podnet-web", 2, true), podnetDeployment("podnet-plain", 1, false)} {
		_, err = cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		name := d.Name
		t.Cleanup(func() { _ = cs.AppsV1().Deployments("default").Delete(ctx, name, metav1.DeleteOptions{}) })
	}

	var web []corev1.Pod
	g.Eventually(func(g Gomega) {
		web = runningPods(ctx, g, cs, "podnet-web", 2)
		for _, p := range web {
			g.Expect(pn.PodNamespace("default/"+p.Name)).NotTo(BeEmpty(), p.Name)
		}
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	plain := runningPods(ctx, g, cs, "podnet-plain", 1)

	seen := map[netip.Addr]string{}
	for _, p := range append(append([]corev1.Pod(nil), web...), plain...) {
		addr := netip.MustParseAddr(p.Status.PodIP)
		// Pod IPs come from the node's slice of the pod subnet, never
		// twice, and never from the bridge's subnet.
		g.Expect(theLab.PodCIDR(p.Spec.NodeName).Contains(addr)).To(BeTrue(), "%s: %s not in %s", p.Name, addr, theLab.PodCIDR(p.Spec.NodeName))
		g.Expect(theLab.PodSubnet.Contains(addr)).To(BeTrue())
		g.Expect(theLab.Net.Subnet.Contains(addr)).To(BeFalse())
		g.Expect(seen).NotTo(HaveKey(addr), "%s has the IP of %s", p.Name, seen[addr])
		seen[addr] = p.Name
	}
	g.Consistently(func() string { return pn.PodNamespace("default/" + plain[0].Name) }, time.Second, 100*time.Millisecond).
		Should(BeEmpty(), "a pod that claims no IP gets no namespace")

	// The lab client, listening for a datagram from a pod.
	var pc net.PacketConn
	g.Expect(labnet.Do(theLab.Net.ClientNamespace(), func() error {
		var err error
		pc, err = net.ListenPacket("udp", netip.AddrPortFrom(theLab.Net.ClientAddr(), 0).String())
		return err
	})).To(Succeed())
	defer pc.Close()

	var namespaces []string
	for _, p := range web {
		key := "default/" + p.Name
		ns := pn.PodNamespace(key)
		namespaces = append(namespaces, ns)
		g.Expect(filepath.Join("/run/netns", ns)).To(BeAnExistingFile())
		g.Expect(ns).To(Equal(theLab.Net.PodNamespace(p.Spec.NodeName, key)))

		// Dialled from its node's namespace, the pod answers with its name.
		target := netip.AddrPortFrom(netip.MustParseAddr(p.Status.PodIP), lab.PodServerPort).String()
		var reply string
		g.Expect(labnet.Do(theLab.Net.NodeNamespace(p.Spec.NodeName), func() error {
			var err error
			reply, err = dialAndRead(target)
			return err
		})).To(Succeed(), p.Name)
		g.Expect(reply).To(Equal(p.Name + "\n"))

		// From the pod's namespace, traffic reaches the client through the
		// node, with the pod IP as its source (no agent SNATs it here).
		g.Expect(labnet.Do(ns, func() error {
			c, err := net.Dial("udp", pc.LocalAddr().String())
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte(p.Name))
			return err
		})).To(Succeed())
		_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 256)
		n, from, err := pc.ReadFrom(buf)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(buf[:n])).To(Equal(p.Name))
		g.Expect(from.(*net.UDPAddr).IP.String()).To(Equal(p.Status.PodIP))
	}
	g.Expect(theLab.Net.PodNamespaces()).To(ContainElements(namespaces))

	// Deleting the Deployment removes the pods' namespaces and servers.
	g.Expect(cs.AppsV1().Deployments("default").Delete(ctx, "podnet-web", metav1.DeleteOptions{})).To(Succeed())
	for _, p := range web {
		g.Eventually(func() string { return pn.PodNamespace("default/" + p.Name) }, time.Minute, 200*time.Millisecond).
			Should(BeEmpty(), p.Name)
	}
	g.Expect(theLab.Net.PodNamespaces()).NotTo(ContainElements(namespaces))
	for _, ns := range namespaces {
		_, err := os.Stat(filepath.Join("/run/netns", ns))
		g.Expect(os.IsNotExist(err)).To(BeTrue(), ns)
	}
	for _, p := range web {
		g.Expect(labnet.Do(theLab.Net.NodeNamespace(p.Spec.NodeName), func() error {
			_, err := dialAndRead(netip.AddrPortFrom(netip.MustParseAddr(p.Status.PodIP), lab.PodServerPort).String())
			return err
		})).NotTo(Succeed(), "%s still answers", p.Name)
	}
}

// KillNode kills the node's agent, cuts its namespace off the bridge and
// makes it NotReady; ReviveNode brings it back.
func TestPodNetKillAndReviveNode(t *testing.T) {
	rootOnly(t)
	g := NewWithT(t)
	ctx := context.Background()
	node := theLab.Nodes[1]
	nodeNS := theLab.Net.NodeNamespace(node)
	if len(theLab.ProcessesIn(nodeNS)) > 0 {
		t.Skipf("%s already runs processes (agents of another test), which KillNode would kill", node)
	}

	agent, err := theLab.Start("fake-agent-"+node, nodeNS, "sleep", []string{"600"})
	g.Expect(err).NotTo(HaveOccurred())
	other, err := theLab.Start("fake-agent-"+theLab.Nodes[0], theLab.Net.NodeNamespace(theLab.Nodes[0]), "sleep", []string{"600"})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { other.Stop(time.Second); agent.Stop(time.Second) })

	kubectl := filepath.Join(theLab.K8sDir(), "kubectl")
	reachAPI := func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		out, err := labnet.Command(cctx, nodeNS, kubectl, "--kubeconfig", theLab.AgentKubeconfig,
			"--request-timeout", "3s", "get", "node", node, "-o", "name").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	g.Expect(reachAPI()).To(Succeed())

	g.Expect(theLab.KillNode(ctx, node)).To(Succeed())
	t.Cleanup(func() { _ = theLab.ReviveNode(ctx, node) })
	g.Expect(agent.Running()).To(BeFalse(), "the node's agent is killed")
	g.Expect(theLab.ProcessesIn(nodeNS)).To(BeEmpty())
	g.Expect(other.Running()).To(BeTrue(), "other nodes' agents are not")
	g.Expect(theLab.WaitNodeReady(ctx, node, false, 30*time.Second)).To(Succeed())
	g.Expect(reachAPI()).NotTo(Succeed(), "a killed node does not reach the API server")
	// A closed port of the node, dialled from the client: no answer at all
	// while the node is cut off, a refusal once it is back.
	knock := func() error {
		return labnet.Do(theLab.Net.ClientNamespace(), func() error {
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(theLab.Net.NodeAddr(node), 9).String(), time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	g.Expect(knock()).To(MatchError(ContainSubstring("timeout")), "the client gets no answer from a killed node")

	g.Expect(theLab.ReviveNode(ctx, node)).To(Succeed())
	g.Expect(theLab.WaitNodeReady(ctx, node, true, 30*time.Second)).To(Succeed())
	g.Expect(reachAPI()).To(Succeed())
	g.Expect(knock()).To(MatchError(ContainSubstring("refused")))
}
