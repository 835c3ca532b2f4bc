package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/lab/labnet"
)

// The lab is a real cluster: the real scheduler places a Deployment's pods
// on the simulated nodes and kwok runs them.
func TestLabSchedulesDeploymentOnSimulatedNodes(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cs, err := theLab.Clientset()
	g.Expect(err).NotTo(HaveOccurred())

	labels := map[string]string{"app": "lab-check"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "lab-check", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](4),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	_, err = cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cs.AppsV1().Deployments("default").Delete(ctx, "lab-check", metav1.DeleteOptions{}) })

	g.Eventually(func(g Gomega) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=lab-check"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pods.Items).To(HaveLen(4))
		for _, p := range pods.Items {
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), p.Name)
			g.Expect(theLab.Nodes).To(ContainElement(p.Spec.NodeName), p.Name)
			g.Expect(p.Spec.SchedulerName).To(Equal(corev1.DefaultSchedulerName))
		}
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	g.Eventually(func() (int32, error) {
		d, err := cs.AppsV1().Deployments("default").Get(ctx, "lab-check", metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		return d.Status.ReadyReplicas, nil
	}, time.Minute, 200*time.Millisecond).Should(BeEquivalentTo(4))
}

// A simulated node failure makes the node NotReady; recovery brings it back.
func TestLabNodeFailureAndRecovery(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	node := theLab.Nodes[1]
	g.Expect(theLab.FailNode(ctx, node)).To(Succeed())
	g.Expect(theLab.WaitNodeReady(ctx, node, false, 30*time.Second)).To(Succeed())
	g.Expect(theLab.RecoverNode(ctx, node)).To(Succeed())
	g.Expect(theLab.WaitNodeReady(ctx, node, true, 30*time.Second)).To(Succeed())
}

// A simulated reboot takes the node down, changes its boot ID and brings it
// back Ready.
func TestLabRebootChangesBootID(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	node := theLab.Nodes[2]
	before, err := theLab.BootID(ctx, node)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(before).NotTo(BeEmpty())

	g.Expect(theLab.Reboot(ctx, node)).To(Succeed())

	after, err := theLab.BootID(ctx, node)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after).NotTo(BeEmpty())
	g.Expect(after).NotTo(Equal(before))
	g.Expect(theLab.WaitNodeReady(ctx, node, true, time.Second)).To(Succeed())
}

// Every node namespace reaches the client namespace over the bridge, and
// the client sees the node's own address.
func TestLabNodeNamespacesReachClient(t *testing.T) {
	rootOnly(t)
	g := NewWithT(t)
	net := theLab.Net

	var ln netListener
	g.Expect(labnet.Do(net.ClientNamespace(), func() error {
		var err error
		ln, err = listen(netip.AddrPortFrom(net.ClientAddr(), 7070).String())
		return err
	})).To(Succeed())
	defer ln.Close()
	seen := make(chan string, len(theLab.Nodes))
	go ln.serve(func(remote string) { seen <- remote })

	for _, node := range theLab.Nodes {
		var reply string
		g.Expect(labnet.Do(net.NodeNamespace(node), func() error {
			var err error
			reply, err = dialAndRead(netip.AddrPortFrom(net.ClientAddr(), 7070).String())
			return err
		})).To(Succeed(), node)
		g.Expect(reply).To(Equal("hello from the client\n"))
		g.Expect(<-seen).To(Equal(net.NodeAddr(node).String()), node)
	}
}

// An agent inside a node namespace reaches the API server through the
// forwarder on the bridge, with TLS verified against the API server's
// certificate.
func TestLabAgentReachesAPIServerFromNodeNamespace(t *testing.T) {
	rootOnly(t)
	g := NewWithT(t)
	node := theLab.Nodes[0]
	kubectl := filepath.Join(theLab.K8sDir(), "kubectl")
	cmd := labnet.Command(context.Background(), theLab.Net.NodeNamespace(node), kubectl,
		"--kubeconfig", theLab.AgentKubeconfig, "get", "node", node, "-o", "name")
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(strings.TrimSpace(string(out))).To(Equal("node/" + node))

	// From the root namespace, loopback still works and the bridge address is
	// the only other way in.
	g.Expect(theLab.AgentKubeconfig).To(BeAnExistingFile())
}

// Bringing a lab up twice in a row works, and taking it down leaves no
// namespace, link or process behind.
func TestLabUpTwiceThenDownLeavesNothing(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	netnsBefore, linksBefore := netnsNames(), linkNames()
	dir := t.TempDir()
	opts := lab.Options{
		Name: "e2e-updown", Prefix: "kxu", Dir: dir, Nodes: 1,
		Subnet: netip.MustParsePrefix("198.51.100.0/24"), Network: os.Geteuid() == 0,
	}
	_, err := lab.Up(ctx, opts)
	if errors.Is(err, labnet.ErrSubnetInUse) {
		t.Skipf("198.51.100.0/24 is taken, probably by a lab from `make lab-up` (run `make lab-down`): %v", err)
	}
	g.Expect(err).NotTo(HaveOccurred())
	l, err := lab.Up(ctx, opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(processesMentioning(dir)).NotTo(BeEmpty(), "the lab's control plane should be running")

	g.Expect(l.Down(ctx)).To(Succeed())
	g.Eventually(func() []string { return processesMentioning(dir) }, 20*time.Second, 200*time.Millisecond).Should(BeEmpty())
	g.Expect(netnsNames()).To(Equal(netnsBefore))
	g.Expect(linkNames()).To(Equal(linksBefore))
	g.Expect(filepath.Join(dir, "state.json")).NotTo(BeAnExistingFile())
}

func netnsNames() []string {
	entries, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func linkNames() []string {
	links, _ := netlink.LinkList()
	var out []string
	for _, l := range links {
		out = append(out, l.Attrs().Name)
	}
	return out
}

// processesMentioning lists running processes whose command line contains s.
func processesMentioning(s string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(s)) {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s", e.Name(), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
	}
	return out
}

type netListener struct{ net.Listener }

func listen(addr string) (netListener, error) {
	l, err := net.Listen("tcp", addr)
	return netListener{l}, err
}

func (l netListener) serve(seen func(remote string)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		_, _ = io.WriteString(c, "hello from the client\n")
		c.Close()
		seen(host)
	}
}

func dialAndRead(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}
