package labnet

import (
	"net"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
)

// Routed pods reach each other across nodes and are reached from the root
// namespace with HostAddr as the source; unrouted pods, the client and the
// gateway stay as isolated as before.
func TestRoutePod(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	n := newPodLab(t, "a", "b")
	a0 := netip.MustParseAddr("198.51.100.5")
	b0 := netip.MustParseAddr("198.51.100.70")
	plain := netip.MustParseAddr("198.51.100.6")
	podA, err := n.AddPod("a", "default/a0", a0)
	g.Expect(err).NotTo(HaveOccurred())
	podB, err := n.AddPod("b", "default/b0", b0)
	g.Expect(err).NotTo(HaveOccurred())
	podPlain, err := n.AddPod("a", "default/plain", plain)
	g.Expect(err).NotTo(HaveOccurred())
	for ns, addr := range map[string]netip.Addr{podA: a0, podB: b0, podPlain: plain} {
		serveText(listenIn(t, ns, netip.AddrPortFrom(addr, 8080).String()), ns)
	}
	at := func(a netip.Addr) string { return netip.AddrPortFrom(a, 8080).String() }

	g.Expect(n.RoutePod("a", a0)).To(Succeed())
	g.Expect(n.RoutePod("a", a0)).To(Succeed(), "idempotent")
	g.Expect(n.RoutePod("b", b0)).To(Succeed())
	g.Expect(n.RoutePod("nope", b0)).NotTo(Succeed())
	g.Expect(n.RoutePod("a", netip.MustParseAddr("192.0.2.9"))).To(MatchError(ContainSubstring("outside the pod subnet")))

	// Pod to pod across nodes, with the pods' own addresses.
	line, err := ask(podB, at(a0), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal(podA + " " + b0.String()))
	line, err = ask(podA, at(b0), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal(podB + " " + a0.String()))
	// The other node itself, with its address.
	line, err = ask(n.NodeNamespace("b"), at(a0), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal(podA + " " + n.NodeAddr("b").String()))
	// The root namespace, from HostAddr.
	c, err := net.DialTimeout("tcp", at(a0), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	buf := make([]byte, 100)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	nr, _ := c.Read(buf)
	c.Close()
	g.Expect(string(buf[:nr])).To(Equal(podA + " " + n.HostAddr().String() + "\n"))

	// Still isolated: the unrouted pod from elsewhere, any pod from the
	// client, the gateway from a routed pod.
	for _, ns := range []string{n.NodeNamespace("b"), podB, n.ClientNamespace()} {
		_, err := ask(ns, at(plain), time.Second)
		g.Expect(err).To(HaveOccurred(), ns)
	}
	_, err = ask(n.ClientNamespace(), at(a0), time.Second)
	g.Expect(err).To(HaveOccurred())
	g.Expect(routeGet(t, n.NodeNamespace("a"), n.Gateway(), &a0, podID("a", "default/a0"))).NotTo(Succeed())
	g.Expect(sysctlIn(t, n.ClientNamespace(), "/proc/sys/net/ipv4/conf/all/forwarding")).To(Equal("0"))

	// A node cut off takes its pods with it.
	g.Expect(n.CutOff("a")).To(Succeed())
	_, err = ask(podB, at(a0), time.Second)
	g.Expect(err).To(HaveOccurred())
	g.Expect(n.Restore("a")).To(Succeed())
	_, err = ask(podB, at(a0), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())

	// Unrouted, the pod is its node's alone again.
	g.Expect(n.UnroutePod("a", a0)).To(Succeed())
	g.Expect(n.UnroutePod("a", a0)).To(Succeed(), "idempotent")
	_, err = ask(podB, at(a0), time.Second)
	g.Expect(err).To(HaveOccurred())
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	g.Expect(err).NotTo(HaveOccurred())
	for _, r := range routes {
		p, ok := toPrefix(r.Dst)
		g.Expect(ok && p == netip.PrefixFrom(a0, 32)).To(BeFalse(), "root route %s", r)
	}
	_, err = ask(n.NodeNamespace("a"), at(a0), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
}
