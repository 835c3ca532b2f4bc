package labnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Cluster-routed pods: a pod of [Network.AddPod] is reachable only from its
// own node, which suits pods whose reachability is the subject of a test
// (static IPs, where only a node agent's NAT may expose a pod). Pods of a
// workload that needs a cluster's flat pod network (Redis members
// replicating from each other, a manager talking to them) are routed with
// [Network.RoutePod] as well:
//
//	every other node ns: A/32 via <node address> dev eth0
//	root ns:             A/32 via <node address> dev P-br src S.2
//	                     S.2/32 on P-br (HostAddr: the host's address on the pod network)
//
// So other nodes and their pods reach the pod through its node, and so do
// processes of the root namespace (the manager run as a local process, the
// tests), with S.2 as their source: a pod answers S.2 through the existing
// rule for pod traffic to the lab subnet, while the gateway S.1, where the
// API-server forwarder listens, stays unreachable from pods. The root
// namespace only delivers pod traffic to itself, never forwards it (its
// forwarding is left off), and the client still reaches no pod. A node cut
// off ([Network.CutOff]) takes its pods with it: their routes lead to an
// address that no longer answers.

// hostPodNetHost is the host part of HostAddr.
const hostPodNetHost = 2

// HostAddr is S.2, the root namespace's source address towards
// cluster-routed pods ([Network.RoutePod]); it is on the bridge once a pod
// has been routed.
func (n *Network) HostAddr() netip.Addr { return hostAddr(n.Subnet, hostPodNetHost) }

// RoutePod makes addr, the address of a pod that [Network.AddPod] plugged
// behind node, reachable from the other nodes, their pods and the root
// namespace (see above). It is idempotent.
func (n *Network) RoutePod(node string, addr netip.Addr) error {
	m, ok := n.node(node)
	if !ok {
		return fmt.Errorf("labnet: no node %q in the lab", node)
	}
	if err := n.checkPodAddr(addr); err != nil {
		return err
	}
	br, err := netlink.LinkByName(n.Bridge())
	if err != nil {
		return fmt.Errorf("labnet: %s: %w", n.Bridge(), err)
	}
	if err := netlink.AddrReplace(br, &netlink.Addr{IPNet: ipNet(n.HostAddr(), 32)}); err != nil {
		return fmt.Errorf("labnet: address %s on %s: %w", n.HostAddr(), n.Bridge(), err)
	}
	dst, gw := ipNet(addr, 32), net.IP(m.Addr.AsSlice())
	if err := netlink.RouteReplace(&netlink.Route{
		LinkIndex: br.Attrs().Index, Dst: dst, Gw: gw, Src: net.IP(n.HostAddr().AsSlice()),
	}); err != nil {
		return fmt.Errorf("labnet: route to pod %s in the root namespace: %w", addr, err)
	}
	for _, other := range n.Nodes {
		if other.Name == node {
			continue
		}
		if err := routeIn(other.Namespace, func(h *netlink.Handle) error {
			eth0, err := h.LinkByName("eth0")
			if err != nil {
				return err
			}
			return h.RouteReplace(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: dst, Gw: gw})
		}); err != nil {
			return fmt.Errorf("labnet: route to pod %s in %s: %w", addr, other.Namespace, err)
		}
	}
	return nil
}

// UnroutePod removes the routes RoutePod made for addr behind node. It is
// idempotent.
func (n *Network) UnroutePod(node string, addr netip.Addr) error {
	m, ok := n.node(node)
	if !ok {
		return fmt.Errorf("labnet: no node %q in the lab", node)
	}
	route := func(link int) *netlink.Route {
		return &netlink.Route{LinkIndex: link, Dst: ipNet(addr, 32), Gw: net.IP(m.Addr.AsSlice())}
	}
	var errs []error
	if br, err := netlink.LinkByName(n.Bridge()); err == nil {
		errs = append(errs, ignoreNoRoute(netlink.RouteDel(route(br.Attrs().Index))))
	}
	for _, other := range n.Nodes {
		if other.Name == node {
			continue
		}
		errs = append(errs, routeIn(other.Namespace, func(h *netlink.Handle) error {
			eth0, err := h.LinkByName("eth0")
			if err != nil {
				return err
			}
			return ignoreNoRoute(h.RouteDel(route(eth0.Attrs().Index)))
		}))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("labnet: unrouting pod %s: %w", addr, err)
	}
	return nil
}

func routeIn(namespace string, fn func(*netlink.Handle) error) error {
	h, err := handleIn(namespace)
	if err != nil {
		return err
	}
	defer h.Close()
	return fn(h)
}

func ignoreNoRoute(err error) error {
	if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}
