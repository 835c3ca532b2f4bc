package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/lab/labnet"
)

// reportDataPathOnFailure logs, if the test has failed by the time this
// cleanup runs, what each piece of the address's path looked like: the
// IP's status, each node's gate and NAT sets, its routes to the pod
// subnet, and whether each pod's server answers from its node. Register it
// after the cleanup that deletes the test's objects, so that it runs first
// (cleanups run last in, first out) and sees them.
func (s *staticIPStack) reportDataPathOnFailure(t *testing.T, ipName string) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("data path at %s:\n%s", time.Now().UTC().Format("15:04:05.000"), s.dataPathReport(ipName))
		}
	})
}

func (s *staticIPStack) dataPathReport(ipName string) string {
	var b strings.Builder
	ip := &ipv1.IP{}
	if err := s.c.Get(context.Background(), client.ObjectKey{Name: ipName}, ip); err != nil {
		fmt.Fprintf(&b, "IP %s: %v\n", ipName, err)
	} else {
		fmt.Fprintf(&b, "IP %s: node %q pod %q standbys %v attached %q/%q generation %d conditions %v\n", ipName,
			ip.Status.Node, ip.Status.Pod, ip.Status.Standbys, ip.Status.AttachedNode, ip.Status.AttachedPod,
			ip.Status.AttachedGeneration, ip.Status.Conditions)
		pod := &corev1.Pod{}
		if ns, name, ok := strings.Cut(ip.Status.Pod, "/"); ok && s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pod) == nil {
			if podIP, err := netip.ParseAddr(pod.Status.PodIP); err == nil && ip.Status.Node != "" {
				fmt.Fprintf(&b, "from %s to the pod at %s: %s\n", ip.Status.Node, podIP, askPod(theLab.Net.NodeNamespace(ip.Status.Node), podIP))
			}
		}
	}
	for _, n := range theLab.Nodes {
		fmt.Fprintf(&b, "node %s:\n", n)
		for _, set := range []string{"owned4", "held4", "dnat4", "snat4"} {
			elems, err := nftElements(n, set)
			fmt.Fprintf(&b, "  nft %s: %s %v\n", set, formatElements(elems), errOrNil(err))
		}
		fmt.Fprintf(&b, "  addresses: %v\n", answersOnAll(n))
		fmt.Fprintf(&b, "  routes: %s\n", podRoutes(n))
	}
	for _, key := range s.pods.Pods() {
		fmt.Fprintf(&b, "pod %s: %s\n", key, s.podAnswers(key))
	}
	return b.String()
}

func errOrNil(err error) string {
	if err == nil {
		return ""
	}
	return "(" + err.Error() + ")"
}

func formatElements(elems []nftables.SetElement) string {
	var out []string
	for _, e := range elems {
		k, _ := netip.AddrFromSlice(e.Key[:min(len(e.Key), 4)])
		s := k.String()
		if len(e.Val) >= 4 {
			v, _ := netip.AddrFromSlice(e.Val[:4])
			s += "→" + v.String()
		}
		if e.Expires > 0 {
			s += fmt.Sprintf(" (expires in %s)", e.Expires)
		}
		out = append(out, s)
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// podRoutes lists the node's routes into the pod subnet.
func podRoutes(node string) string {
	var out []string
	err := labnet.Do(theLab.Net.NodeNamespace(node), func() error {
		routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		for _, r := range routes {
			if r.Dst != nil && theLab.Net.PodSubnet.Contains(netip.MustParseAddr(r.Dst.IP.String())) {
				link, _ := netlink.LinkByIndex(r.LinkIndex)
				name := "?"
				if link != nil {
					name = link.Attrs().Name
				}
				out = append(out, r.Dst.String()+" dev "+name)
			}
		}
		return err
	})
	return strings.Join(out, ", ") + errOrNil(err)
}

// podAnswers says whether the pod's server answers from its node.
func (s *staticIPStack) podAnswers(key string) string {
	ns := s.pods.PodNamespace(key)
	var addr string
	_ = labnet.Do(ns, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if len(addrs) > 0 {
			addr = addrs[0].IP.String()
		}
		return err
	})
	if addr == "" {
		return "namespace " + ns + ", no address"
	}
	return fmt.Sprintf("namespace %s at %s, from inside: %s", ns, addr, askPod(ns, netip.MustParseAddr(addr)))
}

// askPod asks the pod server at addr from the namespace.
func askPod(namespace string, addr netip.Addr) string {
	var reply string
	err := labnet.Do(namespace, func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(addr, lab.PodServerPort).String(), 300*time.Millisecond)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 256)
		n, _ := c.Read(buf)
		reply = strings.TrimSpace(string(buf[:n]))
		return nil
	})
	return fmt.Sprintf("answers %q %s", reply, errOrNil(err))
}
