package e2e

import (
	"net"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/kubext/kubext/test/lab/labnet"
)

// lab.Isolate cuts a node off from its peers but not from the kept
// address (the client), with its link up; Rejoin heals it. The failover
// bench's partition relies on both halves.
func TestLabIsolateKeepsTheClient(t *testing.T) {
	rootOnly(t)
	g := NewWithT(t)
	node, peer := theLab.Nodes[0], theLab.Nodes[1]
	target := netip.AddrPortFrom(theLab.Net.NodeAddr(node), 7073).String()
	var ln net.Listener
	g.Expect(labnet.Do(theLab.Net.NodeNamespace(node), func() (err error) {
		ln, err = net.Listen("tcp", target)
		return err
	})).To(Succeed())
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dial := func(ns string) error {
		return labnet.Do(ns, func() error {
			c, err := net.DialTimeout("tcp", target, 500*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	g.Expect(dial(theLab.Net.NodeNamespace(peer))).To(Succeed())

	g.Expect(theLab.Isolate(node, theLab.Net.ClientAddr())).To(Succeed())
	t.Cleanup(func() { _ = theLab.Rejoin(node) })
	g.Expect(dial(theLab.Net.ClientNamespace())).To(Succeed(), "the client still reaches the isolated node")
	g.Expect(dial(theLab.Net.NodeNamespace(peer))).NotTo(Succeed(), "a peer does not")
	g.Expect(theLab.Isolate(node, theLab.Net.ClientAddr())).To(Succeed(), "isolating twice replaces the rules")

	g.Expect(theLab.Rejoin(node)).To(Succeed())
	g.Expect(dial(theLab.Net.NodeNamespace(peer))).To(Succeed(), "after Rejoin the peer reaches it again")
	g.Expect(theLab.Rejoin(node)).To(Succeed(), "rejoining a node that is not isolated is harmless")
}
