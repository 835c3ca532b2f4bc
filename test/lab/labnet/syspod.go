package labnet

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// System pod namespaces: the namespaces of the lab's own control-plane
// pods (kubext's manager replicas and its other pods without host
// network, in deployed mode). Unlike the workload pods of [Network.AddPod],
// which sit behind their node and may never reach the root namespace, a
// system pod is plugged straight into the root namespace, where the API
// server runs:
//
//	pod ns:  eth0 A/32; 169.254.1.1 dev eth0 (scope link); default via 169.254.1.1;
//	         a permanent neighbour entry for 169.254.1.1 = the MAC of <prefix>-s<hash>
//	root ns: <prefix>-s<hash> (no address); A/32 dev <prefix>-s<hash> src <gateway>
//
// So the API server can dial the pod's own IP (a webhook Service's endpoint,
// with --enable-aggregator-routing), and the pod reaches the API server
// through a forwarder listening on the gateway address bound to the pod's
// veth ([Forward] with the link as device): no other namespace can use that
// forwarder. Only these /32 routes of kubext's own pods enter the root
// namespace; workload pod addresses still never do.

// systemPodID is the deterministic short name of a system pod's namespace
// and root-side link ("s" and 6 hex digits: "<prefix>-s123abc" fits the
// 15 bytes of an interface name).
func systemPodID(pod string) string {
	sum := sha256.Sum256([]byte(pod))
	return "s" + hex.EncodeToString(sum[:3])
}

// SystemPodNamespace is the network namespace (and the root-side link) of
// [Network.AddSystemPod] for pod, whether or not it exists.
func (n *Network) SystemPodNamespace(pod string) string {
	return n.Prefix + "-" + systemPodID(pod)
}

// SystemPodNamespaces lists the system pod namespaces of this lab that
// exist now.
func (n *Network) SystemPodNamespaces() []string {
	entries, _ := os.ReadDir(netnsDir)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), n.Prefix+"-s") {
			out = append(out, e.Name())
		}
	}
	return out
}

// AddSystemPod gives pod (a unique string, e.g. "namespace/name") a network
// namespace with addr plugged into the root namespace (see above) and
// returns the namespace's name, which is also the name of the root-side
// link. addr must lie in the pod subnet. A leftover for the same pod is
// replaced.
func (n *Network) AddSystemPod(pod string, addr netip.Addr) (namespace string, err error) {
	if pod == "" {
		return "", errors.New("labnet: empty pod name")
	}
	if err := n.checkPodAddr(addr); err != nil {
		return "", err
	}
	if err := n.RemoveSystemPod(pod); err != nil {
		return "", err
	}
	namespace = n.SystemPodNamespace(pod)
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("labnet: system pod %s: %w", pod, err), n.RemoveSystemPod(pod))
		}
	}()
	if err := newNamedNS(namespace); err != nil {
		return namespace, err
	}
	root, err := netlink.NewHandle()
	if err != nil {
		return namespace, err
	}
	defer root.Close()
	return namespace, plugVeth(root, "in the root namespace", namespace, namespace, addr, n.Gateway())
}

// RemoveSystemPod removes what [Network.AddSystemPod] made for pod: the
// root-side link (its route and the peer go with it) and the namespace. It
// stops no processes and is idempotent. It undoes
// [Network.ConnectSystemPod] too.
func (n *Network) RemoveSystemPod(pod string) error {
	name := n.SystemPodNamespace(pod)
	// The routes to it on the nodes first: the namespace holds its address.
	errs := []error{n.disconnectSystemPod(pod, n.systemPodAddr(pod))}
	if l, err := netlink.LinkByName(name); err == nil {
		errs = append(errs, deleteLink(l))
	}
	return errors.Join(append(errs, deleteNamedNS(name))...)
}

// A system pod on the cluster's pod network: in a cluster kubext's manager
// runs behind its node and dials the Redis members by pod IP. The root
// namespace never forwards (see above), so [Network.ConnectSystemPod] gives
// a system pod a second link, into its node's namespace, for the pod subnet
// only:
//
//	pod ns:       eth1 (no address); 169.254.1.2 dev eth1 (scope link), a
//	              permanent neighbour entry for it = the MAC of c<hash>;
//	              <PodSubnet> via 169.254.1.2 dev eth1 src A
//	node ns:      c<hash>; A/32 dev c<hash> src <node address>
//	other nodes:  A/32 via <node address> dev eth0
//
// So the pod reaches the cluster-routed pods ([Network.RoutePod]) from its
// own address, as a pod of its node would, and their replies come back the
// same way; the API server and its forwarder stay on eth0. When the node is
// cut off the pod loses the pods behind other nodes, as a pod of a dead
// node would. The other system pods' addresses, which lie in the pod subnet
// too, are then out of its reach (nothing in the lab needs them).

// systemPodGateway is the link-local next hop of a connected system pod's
// route to the pod subnet (eth0's is podGateway).
var systemPodGateway = netip.MustParseAddr("169.254.1.2")

// systemPodNodeLink is the name, in the node's namespace, of the link that
// [Network.ConnectSystemPod] makes for pod.
func systemPodNodeLink(pod string) string {
	sum := sha256.Sum256([]byte(pod))
	return "c" + hex.EncodeToString(sum[:4])
}

// ConnectSystemPod puts the system pod of [Network.AddSystemPod] at addr on
// the cluster's pod network behind node (see above). It undoes itself on
// error; [Network.RemoveSystemPod] undoes it too.
func (n *Network) ConnectSystemPod(pod, node string, addr netip.Addr) (err error) {
	m, ok := n.node(node)
	if !ok {
		return fmt.Errorf("labnet: no node %q in the lab", node)
	}
	if !n.PodSubnet.IsValid() {
		return errors.New("labnet: the lab network has no pod subnet")
	}
	if err := n.checkPodAddr(addr); err != nil {
		return err
	}
	namespace := n.SystemPodNamespace(pod)
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("labnet: system pod %s on %s's pod network: %w", pod, node, err), n.disconnectSystemPod(pod, addr))
		}
	}()
	podNS, err := netns.GetFromName(namespace)
	if err != nil {
		return err
	}
	defer podNS.Close()
	ph, err := netlink.NewHandleAt(podNS)
	if err != nil {
		return err
	}
	defer ph.Close()
	nh, err := handleIn(m.Namespace)
	if err != nil {
		return err
	}
	defer nh.Close()
	if err := setForwarding(m.Namespace); err != nil {
		return err
	}

	link := systemPodNodeLink(pod)
	// eth1 has no address of its own: the pod's is on eth0, and eth1's
	// route names it as the source.
	host, eth1, err := addVeth(nh, ph, podNS, "in "+m.Namespace, link, "eth1", netip.Addr{})
	if err != nil {
		return err
	}
	gw := net.IP(systemPodGateway.AsSlice())
	if err := neighbourGateway(ph, eth1, host, systemPodGateway); err != nil {
		return err
	}
	if err := ph.RouteAdd(&netlink.Route{
		LinkIndex: eth1.Attrs().Index, Dst: ipNet(n.PodSubnet.Addr(), n.PodSubnet.Bits()), Gw: gw, Src: net.IP(addr.AsSlice()),
	}); err != nil {
		return fmt.Errorf("route to %s via eth1: %w", n.PodSubnet, err)
	}
	if err := nh.RouteAdd(&netlink.Route{
		LinkIndex: host.Attrs().Index, Dst: ipNet(addr, 32), Scope: netlink.SCOPE_LINK, Src: net.IP(m.Addr.AsSlice()),
	}); err != nil {
		return fmt.Errorf("route to %s in %s: %w", addr, m.Namespace, err)
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
			return h.RouteReplace(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: ipNet(addr, 32), Gw: net.IP(m.Addr.AsSlice())})
		}); err != nil {
			return fmt.Errorf("route to %s in %s: %w", addr, other.Namespace, err)
		}
	}
	deadline := time.Now().Add(readyTimeout)
	if err := pollOperUp(ph, "eth1", deadline); err != nil {
		return err
	}
	return pollOperUp(nh, link, deadline)
}

// disconnectSystemPod removes what ConnectSystemPod made for pod at addr,
// on whichever node; it is idempotent.
func (n *Network) disconnectSystemPod(pod string, addr netip.Addr) error {
	var errs []error
	for _, m := range n.Nodes {
		errs = append(errs, deleteLinkIn(m.Namespace, systemPodNodeLink(pod)))
		if !addr.IsValid() {
			continue
		}
		errs = append(errs, routeIn(m.Namespace, func(h *netlink.Handle) error {
			routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: ipNet(addr, 32)}, netlink.RT_FILTER_DST)
			if err != nil {
				return err
			}
			for i := range routes {
				if err := ignoreNoRoute(h.RouteDel(&routes[i])); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	return errors.Join(errs...)
}

// systemPodAddr is the address on eth0 of the system pod's namespace, or
// the zero Addr when it has none (or no namespace).
func (n *Network) systemPodAddr(pod string) netip.Addr {
	h, err := handleIn(n.SystemPodNamespace(pod))
	if err != nil {
		return netip.Addr{}
	}
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return netip.Addr{}
	}
	addrs, err := h.AddrList(eth0, netlink.FAMILY_V4)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}
	}
	a, _ := netip.AddrFromSlice(addrs[0].IP.To4())
	return a
}
