package labnet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
)

// Test-only names: never the prefix or subnet of a developer's running lab.
const testPrefix = "kxt"

var testSubnet = netip.MustParsePrefix("203.0.113.0/24")

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
}

// newLab creates a lab with nodes n0..n2 and removes it when the test ends.
func newLab(t *testing.T, nodes ...string) *Network {
	t.Helper()
	g := NewWithT(t)
	t.Cleanup(func() {
		if err := Destroy(testPrefix); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	n, err := Create(Config{Prefix: testPrefix, Subnet: testSubnet, Nodes: nodes})
	g.Expect(err).NotTo(HaveOccurred())
	return n
}

// namespacesWithPrefix lists the named namespaces of the test lab.
func namespacesWithPrefix(t *testing.T) []string {
	prefix := testPrefix
	t.Helper()
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// linksWithPrefix lists the root-namespace links of the test lab.
func linksWithPrefix(t *testing.T) []string {
	prefix := testPrefix
	t.Helper()
	links, err := linkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, prefix+"-") {
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}

// listenIn starts a TCP listener inside namespace; the socket stays bound to
// that namespace though it is served from an ordinary goroutine.
func listenIn(t *testing.T, namespace, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	err := Do(namespace, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen %s in %s: %v", addr, namespace, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// dialFrom connects to addr from inside namespace.
func dialFrom(namespace, addr string) (net.Conn, error) {
	var c net.Conn
	err := Do(namespace, func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	return c, err
}

func TestValidation(t *testing.T) {
	g := NewWithT(t)
	ok := Config{Prefix: "kx", Subnet: netip.MustParsePrefix("192.0.2.0/24"), Nodes: []string{"a", "b"}}
	g.Expect(ok.Validate()).To(Succeed())

	for _, s := range []string{"10.0.0.0/24", "192.168.1.0/24", "192.0.2.0/25", "192.0.2.0/23", "198.51.100.0/16", "2001:db8::/64"} {
		c := ok
		c.Subnet = netip.MustParsePrefix(s)
		g.Expect(c.Validate()).To(MatchError(ContainSubstring("not allowed")), s)
	}
	c := ok
	c.Subnet = netip.Prefix{}
	g.Expect(c.Validate()).NotTo(Succeed())

	for _, p := range []string{"", "kxlong7", "KX", "k-x", "1kx", "k/x", "kx "} {
		c := ok
		c.Prefix = p
		g.Expect(c.Validate()).NotTo(Succeed(), "prefix %q", p)
	}
	g.Expect(ValidatePrefix("kxe2e")).To(Succeed())
	g.Expect(ValidatePrefix("kxe2e1")).To(Succeed())

	c = ok
	c.Nodes = []string{"a", "a"}
	g.Expect(c.Validate()).To(MatchError(ContainSubstring("duplicate")))
	c.Nodes = []string{""}
	g.Expect(c.Validate()).NotTo(Succeed())
	c.Nodes = make([]string, MaxNodes+1)
	g.Expect(c.Validate()).NotTo(Succeed())

	// Refused before anything is touched, so these need no root.
	_, err := Create(Config{Prefix: "kx", Subnet: netip.MustParsePrefix("10.1.2.0/24")})
	g.Expect(err).To(MatchError(ContainSubstring("not allowed")))
	g.Expect(Destroy("")).NotTo(Succeed())
	g.Expect(Destroy("toolong")).NotTo(Succeed())
}

func TestPlanAndJSON(t *testing.T) {
	g := NewWithT(t)
	n := plan(Config{Prefix: "kx", Subnet: netip.MustParsePrefix("192.0.2.0/24"), Nodes: []string{"w1", "w2"}})
	g.Expect(n.Gateway()).To(Equal(netip.MustParseAddr("192.0.2.1")))
	g.Expect(n.NodeNamespace("w2")).To(Equal("kx-n1"))
	g.Expect(n.NodeAddr("w1")).To(Equal(netip.MustParseAddr("192.0.2.10")))
	g.Expect(n.NodeAddr("w2")).To(Equal(netip.MustParseAddr("192.0.2.11")))
	g.Expect(n.NodeNamespace("nope")).To(BeEmpty())
	g.Expect(n.NodeAddr("nope").IsValid()).To(BeFalse())
	g.Expect(n.ClientNamespace()).To(Equal("kx-client"))
	g.Expect(n.ClientAddr()).To(Equal(netip.MustParseAddr("192.0.2.200")))

	b, err := json.Marshal(n)
	g.Expect(err).NotTo(HaveOccurred())
	var back Network
	g.Expect(json.Unmarshal(b, &back)).To(Succeed())
	g.Expect(&back).To(Equal(n))

	// Longest prefix, highest node index: names still fit IFNAMSIZ-1.
	big := plan(Config{Prefix: "kxe2e1", Subnet: testSubnet, Nodes: make([]string, MaxNodes)})
	for _, m := range append(big.Nodes, big.Client) {
		g.Expect(len(m.HostLink)).To(BeNumerically("<=", 15), m.HostLink)
	}
	g.Expect(big.Nodes[MaxNodes-1].Addr).To(Equal(netip.MustParseAddr("203.0.113.99")))
}

func TestForwardRefusesUnspecified(t *testing.T) {
	g := NewWithT(t)
	for _, l := range []string{"0.0.0.0:0", ":0", "[::]:0", "localhost:0", "nonsense"} {
		_, err := Forward(l, "127.0.0.1:1", "")
		g.Expect(err).To(HaveOccurred(), l)
	}
}

func TestCommandInvalidNamespace(t *testing.T) {
	g := NewWithT(t)
	cmd := Command(context.Background(), "../etc", "true")
	g.Expect(cmd.Run()).To(MatchError(ContainSubstring("invalid namespace")))
}

func TestCreateConnectivityDestroy(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	nodes := []string{"node-a", "node-b", "node-c"}
	n := newLab(t, nodes...)

	// `ip netns list` reads /run/netns: the 3 node namespaces and the client.
	g.Expect(namespacesWithPrefix(t)).To(ConsistOf(testPrefix+"-n0", testPrefix+"-n1", testPrefix+"-n2", testPrefix+"-client"))
	g.Expect(linksWithPrefix(t)).To(ConsistOf(testPrefix+"-br", testPrefix+"-v0", testPrefix+"-v1", testPrefix+"-v2", testPrefix+"-vc"))
	br, err := netlink.LinkByName(n.Bridge())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(br.Attrs().Flags & net.FlagUp).NotTo(BeZero())

	// A server in the client namespace that answers each connection with
	// the remote address it sees.
	ln := listenIn(t, n.ClientNamespace(), netip.AddrPortFrom(n.ClientAddr(), 0).String())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, c.RemoteAddr().String()+"\n")
			c.Close()
		}
	}()

	for _, node := range nodes {
		ns := n.NodeNamespace(node)
		c, err := dialFrom(ns, ln.Addr().String())
		g.Expect(err).NotTo(HaveOccurred(), "dial client from %s", ns)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		g.Expect(err).NotTo(HaveOccurred())
		remote, err := netip.ParseAddrPort(strings.TrimSpace(line))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(remote.Addr()).To(Equal(n.NodeAddr(node)), "server saw node %s", node)
	}

	// Each node namespace has the gateway as its default route and can
	// reach the root namespace's bridge address.
	gwLn, err := net.Listen("tcp", netip.AddrPortFrom(n.Gateway(), 0).String())
	g.Expect(err).NotTo(HaveOccurred())
	defer gwLn.Close()
	go func() {
		for {
			c, err := gwLn.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	c, err := dialFrom(n.NodeNamespace("node-b"), gwLn.Addr().String())
	g.Expect(err).NotTo(HaveOccurred())
	c.Close()

	// Loopback inside a namespace is its own: the root's listener is not there.
	_, err = dialFrom(n.NodeNamespace("node-a"), "127.0.0.1:"+portOf(gwLn.Addr()))
	g.Expect(err).To(HaveOccurred())

	g.Expect(Destroy(testPrefix)).To(Succeed())
	g.Expect(namespacesWithPrefix(t)).To(BeEmpty())
	g.Expect(linksWithPrefix(t)).To(BeEmpty())
	g.Expect(Destroy(testPrefix)).To(Succeed(), "Destroy is idempotent")
}

func portOf(a net.Addr) string {
	_, p, _ := net.SplitHostPort(a.String())
	return p
}

func TestCreateTwice(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	newLab(t, "x", "y")
	// A second Create replaces the first lab, even with fewer nodes.
	n := newLab(t, "z")
	g.Expect(namespacesWithPrefix(t)).To(ConsistOf(testPrefix+"-n0", testPrefix+"-client"))
	g.Expect(linksWithPrefix(t)).To(ConsistOf(testPrefix+"-br", testPrefix+"-v0", testPrefix+"-vc"))

	ln := listenIn(t, n.ClientNamespace(), netip.AddrPortFrom(n.ClientAddr(), 0).String())
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
	}()
	c, err := dialFrom(n.NodeNamespace("z"), ln.Addr().String())
	g.Expect(err).NotTo(HaveOccurred())
	c.Close()
}

func TestCreateRefusesSubnetInUse(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	// Another lab prefix already holds the subnet.
	t.Cleanup(func() { _ = Destroy("kxu") })
	_, err := Create(Config{Prefix: "kxu", Subnet: testSubnet, Nodes: []string{"a"}})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = Create(Config{Prefix: testPrefix, Subnet: testSubnet, Nodes: []string{"a"}})
	g.Expect(err).To(MatchError(ContainSubstring("already in use")))
	g.Expect(namespacesWithPrefix(t)).To(BeEmpty())
}

// A network whose owner was killed (a CI job cut off) no longer holds its
// subnet; one whose owner lives, or cannot be judged from here, still does.
func TestCreateReclaimsTheSubnetOfAGoneOwner(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	t.Cleanup(func() { _ = Destroy("kxu") })
	_, err := Create(Config{Prefix: "kxu", Subnet: testSubnet, Nodes: []string{"a"}})
	g.Expect(err).NotTo(HaveOccurred())
	br, err := netlink.LinkByName("kxu-br")
	g.Expect(err).NotTo(HaveOccurred())

	child := exec.Command("sleep", "60")
	g.Expect(child.Start()).To(Succeed())
	dead, err := processOwner(child.Process.Pid)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(child.Process.Kill()).To(Succeed())
	_ = child.Wait()
	self, err := currentOwner()
	g.Expect(err).NotTo(HaveOccurred())
	otherNS := self
	otherNS.PIDNS++
	reused := self
	reused.Start++

	// Owners that may be alive: refused, nothing removed.
	for _, o := range []owner{self, otherNS} {
		g.Expect(netlink.LinkSetAlias(br, o.alias())).To(Succeed())
		_, err = Create(Config{Prefix: testPrefix, Subnet: testSubnet, Nodes: []string{"a"}})
		g.Expect(err).To(MatchError(ErrSubnetInUse), "owner %+v", o)
		_, err = netlink.LinkByName("kxu-br")
		g.Expect(err).NotTo(HaveOccurred())
	}
	// A bridge without an owner (the lab CLI's, or made by hand) is kept too.
	g.Expect(netlink.LinkSetAlias(br, "")).To(Succeed())
	_, err = Create(Config{Prefix: testPrefix, Subnet: testSubnet, Nodes: []string{"a"}})
	g.Expect(err).To(MatchError(ErrSubnetInUse))

	// Owners that are gone: the dead child, and this PID with another start time.
	for _, o := range []owner{dead, reused} {
		_, err = Create(Config{Prefix: "kxu", Subnet: testSubnet, Nodes: []string{"a"}})
		g.Expect(err).NotTo(HaveOccurred())
		br, err = netlink.LinkByName("kxu-br")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(netlink.LinkSetAlias(br, o.alias())).To(Succeed())
		n, err := Create(Config{Prefix: testPrefix, Subnet: testSubnet, Nodes: []string{"a"}})
		g.Expect(err).NotTo(HaveOccurred(), "owner %+v", o)
		_, err = netlink.LinkByName("kxu-br")
		g.Expect(err).To(HaveOccurred(), "the stale network is removed")
		g.Expect(Destroy(n.Prefix)).To(Succeed())
	}
}

func TestOwnerAlias(t *testing.T) {
	g := NewWithT(t)
	o := owner{PID: 42, Start: 7, PIDNS: 4026531836}
	back, ok := parseOwner(o.alias())
	g.Expect(ok).To(BeTrue())
	g.Expect(back).To(Equal(o))
	for _, bad := range []string{"", "kubext-lab owner=", "kubext-lab owner=0 start=1 pidns=2", "kubext-lab owner=x start=1 pidns=2", "something else"} {
		_, ok := parseOwner(bad)
		g.Expect(ok).To(BeFalse(), bad)
	}
}

func TestCommandAndNamespacePIDs(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	n := newLab(t, "a")
	ns := n.NodeNamespace("a")

	// Inside the namespace eth0 carries the node address.
	out, err := Command(context.Background(), ns, "cat", "/proc/net/fib_trie").Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring(n.NodeAddr("a").String()))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := Command(ctx, ns, "sleep", "60")
	g.Expect(cmd.Start()).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	// nsenter execs the program, so the started PID itself is in the namespace.
	g.Eventually(func() ([]int, error) { return NamespacePIDs(ns) }, 5*time.Second, 20*time.Millisecond).
		Should(ContainElement(cmd.Process.Pid))
	pids, err := NamespacePIDs(n.ClientNamespace())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pids).To(BeEmpty())
	self, err := NamespacePIDs(ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(self).NotTo(ContainElement(os.Getpid()))

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("cancelling the context did not stop the command")
	}
	g.Eventually(func() ([]int, error) { return NamespacePIDs(ns) }, 5*time.Second, 20*time.Millisecond).Should(BeEmpty())

	_, err = NamespacePIDs(testPrefix + "-nope")
	g.Expect(err).To(HaveOccurred())
}

func TestIPNetnsExecCompatible(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("ip is not installed: run `make test-deps` as root, or apt-get install -y iproute2")
	}
	g := NewWithT(t)
	n := newLab(t, "a")
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(string(out)).To(ContainSubstring(n.NodeNamespace("a")))
	out, err = exec.Command("ip", "netns", "exec", n.ClientNamespace(), "ip", "-4", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(string(out)).To(ContainSubstring(n.ClientAddr().String() + "/24"))
}

// threadNamespaces returns the distinct network namespaces of all threads
// of this process.
func threadNamespaces(t *testing.T) map[string]bool {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, task := range tasks {
		l, err := os.Readlink(filepath.Join("/proc/self/task", task.Name(), "ns/net"))
		if err == nil {
			out[l] = true
		}
	}
	return out
}

func TestDoRestoresNamespace(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	// The main thread's namespace, which /proc/<pid>/ns/net reports.
	root, err := os.Readlink("/proc/self/ns/net")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(threadNamespaces(t)).To(Equal(map[string]bool{root: true}))

	n := newLab(t, "a")
	var inside string
	g.Expect(Do(n.NodeNamespace("a"), func() error {
		var err error
		inside, err = os.Readlink("/proc/thread-self/ns/net")
		return err
	})).To(Succeed())
	g.Expect(inside).NotTo(Equal(root))

	want := errors.New("boom")
	g.Expect(Do(n.NodeNamespace("a"), func() error { return want })).To(MatchError(want))
	g.Expect(func() { _ = Do(n.NodeNamespace("a"), func() error { panic("p") }) }).To(PanicWith("p"))
	g.Expect(Do(testPrefix+"-nope", func() error { return nil })).NotTo(Succeed())

	// A t.FailNow inside fn ends the calling test goroutine, as it would without Do.
	ended := make(chan bool, 1)
	go func() {
		defer func() { ended <- true }()
		_ = Do(n.ClientNamespace(), func() error { runtime.Goexit(); return nil })
		ended <- false
	}()
	g.Expect(<-ended).To(BeTrue())

	for range 20 {
		g.Expect(Do(n.ClientNamespace(), func() error { return nil })).To(Succeed())
	}
	// After Create and Do, no thread of this process (the main thread
	// included) is left in a lab namespace.
	g.Expect(threadNamespaces(t)).To(Equal(map[string]bool{root: true}))
	pids, err := NamespacePIDs(n.NodeNamespace("a"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pids).NotTo(ContainElement(os.Getpid()))
}

func TestDestroyWithLiveProcess(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	n := newLab(t, "a")
	cmd := Command(context.Background(), n.NodeNamespace("a"), "sleep", "60")
	g.Expect(cmd.Start()).To(Succeed())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	g.Eventually(func() ([]int, error) { return NamespacePIDs(n.NodeNamespace("a")) }, 5*time.Second, 20*time.Millisecond).
		Should(ContainElement(cmd.Process.Pid))

	// Destroy does not wait for or kill processes; it still removes every
	// name, and the veth pair goes with its root end.
	g.Expect(Destroy(testPrefix)).To(Succeed())
	g.Expect(namespacesWithPrefix(t)).To(BeEmpty())
	g.Expect(linksWithPrefix(t)).To(BeEmpty())
	g.Expect(cmd.Process.Signal(syscall.Signal(0))).To(Succeed(), "process left alone")
}
