package labnet

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// testPodSubnet is where the tests' pod addresses come from; it is not the
// test bridge's subnet and is only ever used inside the test namespaces.
var testPodSubnet = netip.MustParsePrefix("198.51.100.0/24")

// newPodLab is newLab with a pod subnet.
func newPodLab(t *testing.T, nodes ...string) *Network {
	t.Helper()
	g := NewWithT(t)
	t.Cleanup(func() {
		if err := Destroy(testPrefix); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	n, err := Create(Config{Prefix: testPrefix, Subnet: testSubnet, Nodes: nodes, PodSubnet: testPodSubnet})
	g.Expect(err).NotTo(HaveOccurred())
	return n
}

// serveText answers every connection on ln with text, then the remote
// address it saw.
func serveText(ln net.Listener, text string) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			_, _ = io.WriteString(c, text+" "+host+"\n")
			c.Close()
		}
	}()
}

// ask dials addr from namespace and returns the first line of the answer.
func ask(namespace, addr string, timeout time.Duration) (string, error) {
	var line string
	err := Do(namespace, func() error {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		line, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	return strings.TrimSpace(line), err
}

func sysctlIn(t *testing.T, namespace, path string) string {
	t.Helper()
	var v string
	if err := Do(namespace, func() error { v = readSysctl(path); return nil }); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestPodNamingAndValidation(t *testing.T) {
	g := NewWithT(t)
	n := plan(Config{Prefix: "kxe2e1", Subnet: testSubnet, Nodes: []string{"node-0", "node-1"}, PodSubnet: testPodSubnet})
	ns := n.PodNamespace("node-0", "default/web-0")
	g.Expect(ns).To(MatchRegexp(`^kxe2e1-p[0-9a-f]{8}$`))
	g.Expect(n.PodNamespace("node-0", "default/web-0")).To(Equal(ns), "deterministic")
	g.Expect(n.PodNamespace("node-1", "default/web-0")).NotTo(Equal(ns), "per node")
	g.Expect(n.PodNamespace("node-0", "default/web-1")).NotTo(Equal(ns), "per pod")
	g.Expect(len(podID("node-0", "default/web-0"))).To(BeNumerically("<=", 15), "a link name")

	g.Expect(ValidatePodSubnet(testPodSubnet, testSubnet)).To(Succeed())
	g.Expect(ValidatePodSubnet(netip.MustParsePrefix("192.0.2.128/25"), testSubnet)).To(Succeed())
	g.Expect(ValidatePodSubnet(netip.MustParsePrefix("2001:db8::/64"), testSubnet)).NotTo(Succeed())
	for _, s := range []string{"10.0.0.0/24", "198.51.100.0/23", "192.0.0.0/16"} {
		g.Expect(ValidatePodSubnet(netip.MustParsePrefix(s), testSubnet)).To(MatchError(ContainSubstring("not allowed")), s)
	}
	g.Expect(ValidatePodSubnet(testSubnet, testSubnet)).To(MatchError(ContainSubstring("overlaps")))
	g.Expect(ValidatePodSubnet(netip.MustParsePrefix("198.51.100.1/24"), testSubnet)).NotTo(Succeed(), "not masked")
	g.Expect(ValidatePodSubnet(netip.Prefix{}, testSubnet)).NotTo(Succeed())

	c := Config{Prefix: "kx", Subnet: testSubnet, PodSubnet: netip.MustParsePrefix("203.0.113.128/25")}
	g.Expect(c.Validate()).To(MatchError(ContainSubstring("overlaps")))
	c.PodSubnet = netip.Prefix{}
	g.Expect(c.Validate()).To(Succeed(), "the pod subnet is optional")

	// Refused before anything is touched.
	_, err := n.AddPod("node-0", "p", netip.MustParseAddr("203.0.113.50"))
	g.Expect(err).To(MatchError(ContainSubstring("outside the pod subnet")))
	_, err = n.AddPod("nope", "p", netip.MustParseAddr("198.51.100.5"))
	g.Expect(err).To(MatchError(ContainSubstring("no node")))
	_, err = plan(Config{Prefix: "kx", Subnet: testSubnet, Nodes: []string{"a"}}).AddPod("a", "p", netip.MustParseAddr("198.51.100.5"))
	g.Expect(err).To(MatchError(ContainSubstring("no pod subnet")))
	g.Expect(n.CutOff("nope")).NotTo(Succeed())
	g.Expect(n.Restore("nope")).NotTo(Succeed())
}

func TestAddPodDataPlane(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	n := newPodLab(t, "a", "b")
	nsA, nsB := n.NodeNamespace("a"), n.NodeNamespace("b")
	web0 := netip.MustParseAddr("198.51.100.5")
	web1 := netip.MustParseAddr("198.51.100.6")
	db := netip.MustParseAddr("198.51.100.70")

	pod0, err := n.AddPod("a", "default/web-0", web0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pod0).To(Equal(n.PodNamespace("a", "default/web-0")))
	pod1, err := n.AddPod("a", "default/web-1", web1)
	g.Expect(err).NotTo(HaveOccurred())
	podDB, err := n.AddPod("b", "default/db", db)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(namespacesWithPrefix(t)).To(ContainElements(pod0, pod1, podDB))
	// Nothing new in the root namespace: no pod link, address or route.
	g.Expect(linksWithPrefix(t)).To(ConsistOf(testPrefix+"-br", testPrefix+"-v0", testPrefix+"-v1", testPrefix+"-vc"))
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	g.Expect(err).NotTo(HaveOccurred())
	for _, r := range routes {
		if p, ok := toPrefix(r.Dst); ok && p.Bits() >= 24 {
			g.Expect(p.Overlaps(testPodSubnet)).To(BeFalse(), "root route %s", r)
		}
	}

	// Forwarding is on in the node namespaces that have pods, and only there.
	g.Expect(sysctlIn(t, nsA, "/proc/sys/net/ipv4/ip_forward")).To(Equal("1"))
	g.Expect(sysctlIn(t, n.ClientNamespace(), "/proc/sys/net/ipv4/ip_forward")).To(Equal("0"))
	g.Expect(sysctlIn(t, pod0, "/proc/sys/net/ipv4/ip_forward")).To(Equal("0"))

	// Each pod has its address as a /32 on eth0.
	out, err := Command(context.Background(), pod0, "ip", "-4", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
	if err == nil {
		g.Expect(string(out)).To(ContainSubstring(web0.String() + "/32"))
	}

	for ns, addr := range map[string]netip.Addr{pod0: web0, pod1: web1, podDB: db} {
		ln := listenIn(t, ns, netip.AddrPortFrom(addr, 8080).String())
		serveText(ln, ns)
	}

	// The node reaches its own pods (with its own address as the source)...
	line, err := ask(nsA, netip.AddrPortFrom(web0, 8080).String(), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal(pod0 + " " + n.NodeAddr("a").String()))
	line, err = ask(nsA, netip.AddrPortFrom(web1, 8080).String(), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal(pod1 + " " + n.NodeAddr("a").String()))
	line, err = ask(nsB, netip.AddrPortFrom(db, 8080).String(), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal(podDB + " " + n.NodeAddr("b").String()))
	// ...and pods on the same node reach each other through it.
	line, err = ask(pod1, netip.AddrPortFrom(web0, 8080).String(), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal(pod0 + " " + web1.String()))

	// Pod addresses are unreachable from the client and from other nodes:
	// the unreachable route fails the dial at once, in that namespace. (The
	// route lookup is checked first, so a broken route fails the test before
	// any packet could go to the root namespace.)
	for _, ns := range []string{n.ClientNamespace(), nsB} {
		g.Expect(routeGet(t, ns, web0, nil, "")).To(MatchError(ContainSubstring("no route to host")), ns)
		start := time.Now()
		_, err = ask(ns, netip.AddrPortFrom(web0, 8080).String(), 5*time.Second)
		g.Expect(err).To(MatchError(ContainSubstring("no route to host")), ns)
		g.Expect(time.Since(start)).To(BeNumerically("<", time.Second))
	}

	// A pod reaches the node's own addresses and the client through its
	// node (which forwards), with its own address as the source. The client
	// cannot answer a pod address, so that is shown with a datagram.
	nodeLn := listenIn(t, nsA, netip.AddrPortFrom(n.NodeAddr("a"), 0).String())
	serveText(nodeLn, "node")
	line, err = ask(pod0, nodeLn.Addr().String(), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal("node " + web0.String()))

	var pc net.PacketConn
	g.Expect(Do(n.ClientNamespace(), func() error {
		var err error
		pc, err = net.ListenPacket("udp", netip.AddrPortFrom(n.ClientAddr(), 0).String())
		return err
	})).To(Succeed())
	defer pc.Close()
	g.Expect(Do(pod0, func() error {
		c, err := net.Dial("udp", pc.LocalAddr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("hello from web-0"))
		return err
	})).To(Succeed())
	_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	nr, from, err := pc.ReadFrom(buf)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(buf[:nr])).To(Equal("hello from web-0"))
	g.Expect(from.(*net.UDPAddr).IP.String()).To(Equal(web0.String()), "the client sees the pod address")

	// Pod traffic that would leave through the root namespace (to the
	// gateway, or anywhere outside the lab subnet) is refused inside the
	// node namespace, while pod traffic to the lab subnet is forwarded
	// onto the bridge. Checked as route lookups for packets arriving from
	// the pod, so that nothing is sent.
	fromPod := podID("a", "default/web-0")
	for _, dst := range []string{n.Gateway().String(), "192.0.2.77", "203.0.114.1", "198.51.100.200"} {
		g.Expect(routeGet(t, nsA, netip.MustParseAddr(dst), &web0, fromPod)).
			To(MatchError(SatisfyAny(ContainSubstring("no route to host"), ContainSubstring("network is unreachable"))), dst)
	}
	g.Expect(routeGet(t, nsA, n.ClientAddr(), &web0, fromPod)).To(Succeed())
	g.Expect(routeGet(t, nsA, web1, &web0, fromPod)).To(Succeed())

	// RemovePod takes the namespace, the veth pair and the route away; it
	// is idempotent, and the other pods are untouched.
	g.Expect(n.RemovePod("a", "default/web-0")).To(Succeed())
	g.Expect(namespacesWithPrefix(t)).NotTo(ContainElement(pod0))
	g.Expect(linkNamesIn(t, nsA)).NotTo(ContainElement(podID("a", "default/web-0")))
	g.Expect(linkNamesIn(t, nsA)).To(ContainElement(podID("a", "default/web-1")))
	_, err = ask(nsA, netip.AddrPortFrom(web0, 8080).String(), time.Second)
	g.Expect(err).To(HaveOccurred())
	g.Expect(n.RemovePod("a", "default/web-0")).To(Succeed())
	g.Expect(n.RemovePod("nope", "x")).To(Succeed())
	line, err = ask(nsA, netip.AddrPortFrom(web1, 8080).String(), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(HavePrefix(pod1 + " "))

	// AddPod again for the same pod replaces what is left.
	again, err := n.AddPod("b", "default/db", netip.MustParseAddr("198.51.100.71"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(podDB))
	g.Expect(linkNamesIn(t, nsB)).To(ContainElement(podID("b", "default/db")))
}

// routeGet looks up the route to dst in namespace, as `ip route get dst
// [from src iif iif]` does, without sending anything.
func routeGet(t *testing.T, namespace string, dst netip.Addr, src *netip.Addr, iif string) error {
	t.Helper()
	ns, err := netns.GetFromName(namespace)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	opts := &netlink.RouteGetOptions{}
	if src != nil {
		opts.SrcAddr = net.IP(src.AsSlice())
	}
	if iif != "" {
		l, err := h.LinkByName(iif)
		if err != nil {
			t.Fatal(err)
		}
		opts.IifIndex = l.Attrs().Index
	}
	_, err = h.RouteGetWithOptions(net.IP(dst.AsSlice()), opts)
	return err
}

// linkNamesIn lists the links of a namespace.
func linkNamesIn(t *testing.T, namespace string) []string {
	t.Helper()
	ns, err := netns.GetFromName(namespace)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		out = append(out, l.Attrs().Name)
	}
	return out
}

func TestCutOffRestore(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	n := newPodLab(t, "a", "b")
	ln := listenIn(t, n.ClientNamespace(), netip.AddrPortFrom(n.ClientAddr(), 0).String())
	serveText(ln, "client")
	for _, node := range []string{"a", "b"} {
		line, err := ask(n.NodeNamespace(node), ln.Addr().String(), 5*time.Second)
		g.Expect(err).NotTo(HaveOccurred(), node)
		g.Expect(line).To(Equal("client " + n.NodeAddr(node).String()))
	}
	nodeLn := listenIn(t, n.NodeNamespace("a"), netip.AddrPortFrom(n.NodeAddr("a"), 0).String())
	serveText(nodeLn, "a")
	gwLn, err := net.Listen("tcp", netip.AddrPortFrom(n.Gateway(), 0).String())
	g.Expect(err).NotTo(HaveOccurred())
	defer gwLn.Close()
	serveText(gwLn, "gateway")

	g.Expect(n.CutOff("a")).To(Succeed())
	g.Expect(n.CutOff("a")).To(Succeed(), "idempotent")
	_, err = ask(n.NodeNamespace("a"), ln.Addr().String(), time.Second)
	g.Expect(err).To(HaveOccurred(), "a cut-off node does not reach the client")
	_, err = ask(n.NodeNamespace("a"), gwLn.Addr().String(), time.Second)
	g.Expect(err).To(HaveOccurred(), "a cut-off node does not reach the gateway (API server)")
	_, err = ask(n.ClientNamespace(), nodeLn.Addr().String(), time.Second)
	g.Expect(err).To(HaveOccurred(), "the client does not reach a cut-off node")
	line, err := ask(n.NodeNamespace("b"), ln.Addr().String(), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred(), "the other node is not affected")
	g.Expect(line).To(Equal("client " + n.NodeAddr("b").String()))

	g.Expect(n.Restore("a")).To(Succeed())
	g.Expect(n.Restore("a")).To(Succeed(), "idempotent")
	line, err = ask(n.NodeNamespace("a"), ln.Addr().String(), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal("client " + n.NodeAddr("a").String()))
	line, err = ask(n.ClientNamespace(), nodeLn.Addr().String(), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal("a " + n.ClientAddr().String()))
	line, err = ask(n.NodeNamespace("a"), gwLn.Addr().String(), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal("gateway " + n.NodeAddr("a").String()))
}

func TestDestroyRemovesPodNamespaces(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	n := newPodLab(t, "a")
	pod, err := n.AddPod("a", "default/web-0", netip.MustParseAddr("198.51.100.9"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n.PodNamespaces()).To(ConsistOf(pod))
	cmd := Command(context.Background(), pod, "sleep", "60")
	g.Expect(cmd.Start()).To(Succeed())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	g.Eventually(func() ([]int, error) { return NamespacePIDs(pod) }, 5*time.Second, 20*time.Millisecond).
		Should(ContainElement(cmd.Process.Pid))

	g.Expect(Destroy(testPrefix)).To(Succeed())
	g.Expect(namespacesWithPrefix(t)).To(BeEmpty())
	g.Expect(linksWithPrefix(t)).To(BeEmpty())
	g.Expect(n.PodNamespaces()).To(BeEmpty())
	_, err = os.Stat(netnsDir + "/" + pod)
	g.Expect(os.IsNotExist(err)).To(BeTrue())
}
