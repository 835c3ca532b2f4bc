package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/lab/labnet"
)

// staticIPStack is the manager, one ip-agent per node and the lab's pod
// network, started once for the package by the first test that needs them.
type staticIPStack struct {
	c       client.Client
	manager *lab.Manager
	agents  map[string]*lab.Process
	pods    *lab.PodNetwork
}

var (
	stackOnce sync.Once
	stack     *staticIPStack
	stackErr  error
)

func staticIP(t *testing.T) *staticIPStack {
	t.Helper()
	rootOnly(t)
	stackOnce.Do(func() { stack, stackErr = startStaticIP(context.Background()) })
	if stackErr != nil {
		t.Fatal(stackErr)
	}
	return stack
}

func startStaticIP(ctx context.Context) (*staticIPStack, error) {
	s := &staticIPStack{agents: map[string]*lab.Process{}}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(ipv1.AddToScheme(scheme))
	cfg, err := theLab.RESTConfig()
	if err != nil {
		return nil, err
	}
	if s.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	if s.manager, err = theLab.StartManager(ctx, "manager", managerArgs...); err != nil {
		return nil, err
	}
	for _, n := range theLab.Nodes {
		if s.agents[n], err = theLab.StartIPAgent(ctx, n); err != nil {
			return nil, err
		}
	}
	if s.pods, err = theLab.StartPodNetwork(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// managerArgs run the static IP controllers; a crashed leader is replaced
// after 4 s instead of 15 s, so the restart rounds stay short.
var managerArgs = []string{"--controllers=ip,ippool", "--leader-elect-lease-duration=4s",
	"--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}

// The subnet of the e2e lab's bridge; static IPs come from its .96/28.
const (
	e2ePool = "203.0.113.96/28"
)

// claimingDeployment runs n pods that claim the IP, on different nodes.
func claimingDeployment(name, ip string, n int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{ipv1.AnnotationIP: ip}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
							TopologyKey:   "kubernetes.io/hostname",
						}},
					}},
				},
			},
		},
	}
}

func (s *staticIPStack) ip(g Gomega, name string) *ipv1.IP {
	ip := &ipv1.IP{}
	g.Expect(s.c.Get(context.Background(), client.ObjectKey{Name: name}, ip)).To(Succeed())
	return ip
}

func ready(ip *ipv1.IP) bool {
	return meta.IsStatusConditionTrue(ip.Status.Conditions, ipv1.ConditionReady)
}

// ask opens a connection to the address from the client namespace and
// returns what the pod behind it says (its name).
func ask(addr netip.Addr, timeout time.Duration) (string, error) {
	var reply string
	err := labnet.Do(theLab.Net.ClientNamespace(), func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(addr, lab.PodServerPort).String(), timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		b, err := io.ReadAll(c)
		reply = strings.TrimSpace(string(b))
		return err
	})
	return reply, err
}

// answersOn lists the node namespaces that have the address configured.
func answersOn(addr netip.Addr) []string {
	var nodes []string
	for _, n := range theLab.Nodes {
		_ = labnet.Do(theLab.Net.NodeNamespace(n), func() error {
			addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
			if err != nil {
				return err
			}
			for _, a := range addrs {
				if a.IP.Equal(addr.AsSlice()) {
					nodes = append(nodes, n)
				}
			}
			return nil
		})
	}
	return nodes
}

// podName is the pod part of a namespace/name key.
func podName(key string) string {
	_, name, _ := strings.Cut(key, "/")
	return name
}

// The address answers from the holder pod in both directions, moves to the
// standby when the holder's node dies, and the dead node stays silent when
// it comes back.
func TestStaticIPAnswersBothWaysAndFailsOver(t *testing.T) {
	s := staticIP(t)
	g := NewWithT(t)
	ctx := context.Background()
	addr := netip.MustParseAddr("203.0.113.100")

	pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "e2e"}, Spec: ipv1.IPPoolSpec{Addresses: []string{e2ePool}}}
	g.Expect(s.c.Create(ctx, pool)).To(Succeed())
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "partner"}, Spec: ipv1.IPSpec{Address: addr.String()}}
	g.Expect(s.c.Create(ctx, ip)).To(Succeed())
	dep := claimingDeployment("partner-app", "partner", 2)
	g.Expect(s.c.Create(ctx, dep)).To(Succeed())
	t.Cleanup(func() {
		_ = s.c.Delete(ctx, dep)
		_ = s.c.Delete(ctx, ip)
	})

	var holder, standby, holderNode string
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, "partner")
		g.Expect(ready(ip)).To(BeTrue(), "IP not Ready: %v", ip.Status.Conditions)
		g.Expect(ip.Status.Standbys).To(HaveLen(1))
		holder, standby, holderNode = podName(ip.Status.Pod), podName(ip.Status.Standbys[0]), ip.Status.Node
	}, time.Minute, 200*time.Millisecond).Should(Succeed())

	// In: the client reaches the holder at the fixed address.
	g.Eventually(func() (string, error) { return ask(addr, time.Second) }, 20*time.Second, 100*time.Millisecond).Should(Equal(holder))
	g.Expect(answersOn(addr)).To(Equal([]string{holderNode}))

	// Out: the holder's own connections reach the client from the fixed
	// address.
	g.Expect(clientSeesSource(s, "default/"+holder)).To(Equal(addr.String()))

	// The holder's node dies: agent gone, network cut, NotReady.
	g.Expect(theLab.KillNode(ctx, holderNode)).To(Succeed())
	start := time.Now()
	g.Eventually(func() (string, error) { return ask(addr, 100*time.Millisecond) }, 30*time.Second, 50*time.Millisecond).Should(Equal(standby))
	t.Logf("the standby answered %s after the holder's node was killed", time.Since(start).Round(10*time.Millisecond))
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, "partner")
		g.Expect(podName(ip.Status.Pod)).To(Equal(standby))
		g.Expect(ready(ip)).To(BeTrue())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	// The dead node comes back without its lease: it must not answer.
	g.Expect(theLab.ReviveNode(ctx, holderNode)).To(Succeed())
	agent, err := theLab.StartIPAgent(ctx, holderNode)
	g.Expect(err).NotTo(HaveOccurred())
	s.agents[holderNode] = agent
	g.Consistently(func(g Gomega) {
		g.Expect(answersOn(addr)).To(HaveLen(1))
		g.Expect(answersOn(addr)).NotTo(ContainElement(holderNode))
		g.Expect(ask(addr, time.Second)).To(Equal(standby))
	}, 3*time.Second, 250*time.Millisecond).Should(Succeed())
}

// clientSeesSource has the pod connect to a server in the client namespace
// and returns the source address the server saw.
func clientSeesSource(s *staticIPStack, pod string) (string, error) {
	var ln net.Listener
	if err := labnet.Do(theLab.Net.ClientNamespace(), func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(theLab.Net.ClientAddr(), 7071).String())
		return err
	}); err != nil {
		return "", err
	}
	defer ln.Close()
	seen := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		c.Close()
		seen <- host
	}()
	ns := s.pods.PodNamespace(pod)
	if ns == "" {
		return "", fmt.Errorf("pod %s has no namespace in the lab pod network", pod)
	}
	if err := labnet.Do(ns, func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(theLab.Net.ClientAddr(), 7071).String(), 3*time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	}); err != nil {
		return "", err
	}
	select {
	case h := <-seen:
		return h, nil
	case <-time.After(3 * time.Second):
		return "", fmt.Errorf("the client saw no connection")
	}
}

// Restarting the manager and the agents in the middle of moves loses
// nothing: the address ends on exactly one node, the holder's, and no
// reservation leaks.
func TestStaticIPSurvivesRestartsMidMove(t *testing.T) {
	s := staticIP(t)
	g := NewWithT(t)
	ctx := context.Background()
	addr := netip.MustParseAddr("203.0.113.101")
	pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "e2e-restarts"}, Spec: ipv1.IPPoolSpec{Addresses: []string{"203.0.113.101/32"}}}
	g.Expect(s.c.Create(ctx, pool)).To(Succeed())
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "restarts"}, Spec: ipv1.IPSpec{Pool: "e2e-restarts"}}
	g.Expect(s.c.Create(ctx, ip)).To(Succeed())
	dep := claimingDeployment("restarts-app", "restarts", 2)
	g.Expect(s.c.Create(ctx, dep)).To(Succeed())
	t.Cleanup(func() {
		_ = s.c.Delete(ctx, dep)
		_ = s.c.Delete(ctx, ip)
		_ = s.c.Delete(ctx, pool)
	})
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, "restarts")
		g.Expect(ready(ip)).To(BeTrue())
		g.Expect(ip.Status.Address).To(Equal(addr.String()))
		g.Expect(ip.Status.Standbys).To(HaveLen(1))
	}, time.Minute, 200*time.Millisecond).Should(Succeed())

	for round := range 3 {
		cur := s.ip(g, "restarts")
		from, to := cur.Status.Node, cur.Status.Standbys[0]
		t.Logf("round %d: moving from %s on %s to %s", round, cur.Status.Pod, from, to)
		// Ask for a move, then crash the manager and the old node's agent
		// while it is under way, and start them again.
		patch := client.RawPatch("application/merge-patch+json",
			[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, ipv1.AnnotationMoveTo, to)))
		g.Expect(s.c.Patch(ctx, cur, patch)).To(Succeed())
		time.Sleep(time.Duration(round*40) * time.Millisecond)
		s.manager.Kill()
		s.agents[from].Kill()
		var err error
		s.manager, err = theLab.StartManager(ctx, "manager", managerArgs...)
		g.Expect(err).NotTo(HaveOccurred())
		s.agents[from], err = theLab.StartIPAgent(ctx, from)
		g.Expect(err).NotTo(HaveOccurred())

		g.Eventually(func(g Gomega) {
			ip := s.ip(g, "restarts")
			g.Expect(ready(ip)).To(BeTrue())
			g.Expect(ip.Status.AttachedNode).To(Equal(ip.Status.Node))
			g.Expect(answersOn(addr)).To(Equal([]string{ip.Status.Node}))
			g.Expect(ask(addr, time.Second)).To(Equal(podName(ip.Status.Pod)))
			g.Expect(ip.Status.Pod).To(Equal(to), "the requested move happened")
		}, time.Minute, 200*time.Millisecond).Should(Succeed(), "round %d", round)
	}
	// One reservation, the IP's.
	list := &networkingv1.IPAddressList{}
	g.Expect(s.c.List(ctx, list, client.MatchingLabels{ipv1.LabelPool: "e2e-restarts"})).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1))
	g.Expect(list.Items[0].Name).To(Equal(addr.String()))
}
