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
