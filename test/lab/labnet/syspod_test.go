package labnet

import (
	"net"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// A system pod is plugged into the root namespace: the root namespace (the
// API server's) reaches the pod's address, the pod reaches the lab's
// gateway address there with its own address as the source, and removing
// it leaves no link, route or namespace behind.
func TestSystemPodDataPlane(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	n := newPodLab(t, "a")
	addr := netip.MustParseAddr("198.51.100.200")

	ns, err := n.AddSystemPod("kubext-system/manager-0", addr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ns).To(Equal(n.SystemPodNamespace("kubext-system/manager-0")))
	g.Expect(n.SystemPodNamespaces()).To(ConsistOf(ns))
	g.Expect(linksWithPrefix(t)).To(ContainElement(ns))

	podLn := listenIn(t, ns, netip.AddrPortFrom(addr, 0).String())
	serveText(podLn, "pod")
	var line string
	g.Eventually(func() error {
		c, err := net.DialTimeout("tcp", podLn.Addr().String(), time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		b := make([]byte, 128)
		k, err := c.Read(b)
		line = string(b[:k])
		return err
	}, 5*time.Second).Should(Succeed())
	g.Expect(line).To(Equal("pod " + n.Gateway().String() + "\n"))

	rootLn, err := net.Listen("tcp", netip.AddrPortFrom(n.Gateway(), 0).String())
	g.Expect(err).NotTo(HaveOccurred())
	defer rootLn.Close()
	serveText(rootLn, "root")
	line, err = ask(ns, rootLn.Addr().String(), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal("root " + addr.String()))

	g.Expect(n.RemoveSystemPod("kubext-system/manager-0")).To(Succeed())
	g.Expect(n.SystemPodNamespaces()).To(BeEmpty())
	g.Expect(linksWithPrefix(t)).NotTo(ContainElement(ns))
	g.Expect(n.RemoveSystemPod("kubext-system/manager-0")).To(Succeed(), "idempotent")
}

// A connected system pod is on the cluster's pod network: it dials routed
// pods on its own node and on others from its own address, and they answer
// it; it still reaches the gateway (the API server's forwarder) through
// the root namespace, reaches no unrouted pod and not the client; root's
// forwarding stays off; a cut-off node takes the pod's reach across nodes;
// removing it leaves no link or route on any node.
func TestConnectSystemPod(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	n := newPodLab(t, "a", "b")
	sys := netip.MustParseAddr("198.51.100.200")
	a0 := netip.MustParseAddr("198.51.100.5")
	b0 := netip.MustParseAddr("198.51.100.70")
	plain := netip.MustParseAddr("198.51.100.71")
	at := func(a netip.Addr) string { return netip.AddrPortFrom(a, 8080).String() }
	pods := map[string]netip.Addr{}
	for _, p := range []struct {
		node, name string
		addr       netip.Addr
		routed     bool
	}{{"a", "default/a0", a0, true}, {"b", "default/b0", b0, true}, {"b", "default/plain", plain, false}} {
		ns, err := n.AddPod(p.node, p.name, p.addr)
		g.Expect(err).NotTo(HaveOccurred())
		serveText(listenIn(t, ns, at(p.addr)), p.name)
		if p.routed {
			g.Expect(n.RoutePod(p.node, p.addr)).To(Succeed())
		}
		pods[p.name] = p.addr
	}
	rootForwarding := readSysctl("/proc/sys/net/ipv4/ip_forward")
	const pod = "kubext-system/manager-0"
	ns, err := n.AddSystemPod(pod, sys)
	g.Expect(err).NotTo(HaveOccurred())
	if rootForwarding == "0" {
		// Before it is connected the root namespace does not forward for it.
		_, err = ask(ns, at(b0), time.Second)
		g.Expect(err).To(HaveOccurred())
	}

	g.Expect(n.ConnectSystemPod(pod, "nope", sys)).To(MatchError(ContainSubstring("no node")))
	g.Expect(n.ConnectSystemPod(pod, "a", netip.MustParseAddr("192.0.2.9"))).To(MatchError(ContainSubstring("outside the pod subnet")))
	g.Expect(n.ConnectSystemPod(pod, "a", sys)).To(Succeed())
	for _, target := range []netip.Addr{a0, b0} {
		line, err := ask(ns, at(target), 5*time.Second)
		g.Expect(err).NotTo(HaveOccurred(), target.String())
		g.Expect(line).To(HaveSuffix(" "+sys.String()), "the pod's own address as the source")
	}
	_, err = ask(ns, at(plain), time.Second)
	g.Expect(err).To(HaveOccurred(), "an unrouted pod stays its node's")
	_, err = ask(ns, netip.AddrPortFrom(n.ClientAddr(), 9).String(), time.Second)
	g.Expect(err).To(HaveOccurred())
	rootLn, err := net.Listen("tcp", netip.AddrPortFrom(n.Gateway(), 0).String())
	g.Expect(err).NotTo(HaveOccurred())
	defer rootLn.Close()
	serveText(rootLn, "root")
	line, err := ask(ns, rootLn.Addr().String(), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal("root " + sys.String()))
	g.Expect(readSysctl("/proc/sys/net/ipv4/ip_forward")).To(Equal(rootForwarding), "the root namespace's forwarding is untouched")

	// Its node cut off, the pods behind other nodes are out of reach; its
	// own node's are not.
	g.Expect(n.CutOff("a")).To(Succeed())
	_, err = ask(ns, at(b0), time.Second)
	g.Expect(err).To(HaveOccurred())
	_, err = ask(ns, at(a0), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n.Restore("a")).To(Succeed())
	_, err = ask(ns, at(b0), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(n.RemoveSystemPod(pod)).To(Succeed())
	for _, node := range []string{"a", "b"} {
		g.Expect(linkNamesIn(t, n.NodeNamespace(node))).NotTo(ContainElement(systemPodNodeLink(pod)))
		g.Expect(routeGet(t, n.NodeNamespace(node), sys, nil, "")).NotTo(Succeed(), node)
	}
	// Added again (a restarted manager pod), it connects again.
	ns, err = n.AddSystemPod(pod, sys)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n.ConnectSystemPod(pod, "b", sys)).To(Succeed())
	_, err = ask(ns, at(a0), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
}
