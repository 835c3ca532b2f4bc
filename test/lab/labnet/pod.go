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
	"golang.org/x/sys/unix"
)

// Pod namespaces: a minimal stand-in for a CNI. A pod with address A on node
// N gets its own namespace "<prefix>-p<hash>" holding eth0 = A/32, whose peer
// "p<hash>" lives in N's namespace:
//
//	pod ns:  eth0 A/32; 169.254.1.1 dev eth0 (scope link); default via 169.254.1.1;
//	         a permanent neighbour entry for 169.254.1.1 = the MAC of p<hash>
//	node ns: p<hash> (no address); A/32 dev p<hash> src <node address>;
//	         net.ipv4.ip_forward=1
//
// The link-local next hop is never assigned anywhere: the static neighbour
// entry makes the pod send everything to the node side of its veth, where the
// node namespace routes (forwards) it. Pod addresses exist only inside node
// and pod namespaces, never in the root namespace.
//
// When the network has a pod subnet (Config.PodSubnet), Create also makes sure
// no packet addressed to, or coming from, a pod address ever reaches the root
// namespace (whose routes lead to the real network):
//
//	client ns and node ns: unreachable <PodSubnet>   (a node's own pods have /32 routes)
//	node ns, rules for traffic from <PodSubnet>:
//	  to the gateway S.1:        unreachable
//	  to the lab subnet S/24:    main table (the bridge: client, other nodes, static IPs)
//	  to <PodSubnet>:            main table (this node's pods)
//	  anything else:             unreachable
//
// So a pod can reach the client through its node, but the client cannot
// reach a pod's address (its packets and replies to pod addresses are
// dropped in the client namespace); only a node agent's NAT can make a pod
// reachable from outside. The rules sit just before the main table's rule
// (priority 32766), so rules an agent adds at lower priorities win.

// podGateway is the link-local next hop of every pod's default route.
var podGateway = netip.MustParseAddr("169.254.1.1")

// Priorities of the node-namespace rules for pod traffic.
const (
	rulePrioPodToGateway = 32000 + iota
	rulePrioPodToLab
	rulePrioPodToPods
	rulePrioPodElsewhere
)

// ValidatePodSubnet reports whether pods may take addresses from podSubnet
// in a lab whose bridge is on subnet: it must lie inside one of the RFC 5737
// documentation /24s and must not overlap the bridge subnet.
func ValidatePodSubnet(podSubnet, subnet netip.Prefix) error {
	if !podSubnet.IsValid() || !podSubnet.Addr().Is4() || podSubnet != podSubnet.Masked() {
		return fmt.Errorf("labnet: pod subnet %s is not a valid IPv4 network", podSubnet)
	}
	if !inDocumentationRange(podSubnet.Addr()) || podSubnet.Bits() < 24 {
		return fmt.Errorf("labnet: pod subnet %s is not allowed; it must lie inside 192.0.2.0/24, 198.51.100.0/24 or 203.0.113.0/24", podSubnet)
	}
	if subnet.IsValid() && podSubnet.Overlaps(subnet) {
		return fmt.Errorf("labnet: pod subnet %s overlaps the lab subnet %s", podSubnet, subnet)
	}
	return nil
}

func inDocumentationRange(a netip.Addr) bool {
	for _, d := range documentationSubnets {
		if d.Contains(a) {
			return true
		}
	}
	return false
}

// podID is the deterministic short name part for a pod on a node.
func podID(node, pod string) string {
	sum := sha256.Sum256([]byte(node + "\x00" + pod))
	return "p" + hex.EncodeToString(sum[:4])
}

// PodNamespace returns the name of the network namespace [Network.AddPod]
// creates for pod (any unique string, e.g. "namespace/name") on node,
// whether or not it exists: "<prefix>-p<8 hex digits>".
func (n *Network) PodNamespace(node, pod string) string {
	return n.Prefix + "-" + podID(node, pod)
}

// PodNamespaces lists the pod namespaces of this lab that exist now.
func (n *Network) PodNamespaces() []string {
	return podNamespaces(n.Prefix)
}

func podNamespaces(prefix string) []string {
	entries, _ := os.ReadDir(netnsDir)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix+"-p") {
			out = append(out, e.Name())
		}
	}
	return out
}

// checkPodAddr refuses addresses that must never be a pod's.
func (n *Network) checkPodAddr(addr netip.Addr) error {
	if !n.PodSubnet.IsValid() {
		return errors.New("labnet: this network has no pod subnet (Config.PodSubnet)")
	}
	if !addr.Is4() || !n.PodSubnet.Contains(addr) {
		return fmt.Errorf("labnet: pod address %s is outside the pod subnet %s", addr, n.PodSubnet)
	}
	return nil
}

// AddPod gives pod (any unique string, e.g. "namespace/name") on node a
// network namespace with addr behind the node's namespace (see the package
// documentation of pod namespaces) and returns the namespace's name. addr
// must lie in the network's pod subnet. A namespace left over for the same
// node and pod is replaced.
func (n *Network) AddPod(node, pod string, addr netip.Addr) (namespace string, err error) {
	m, ok := n.node(node)
	if !ok {
		return "", fmt.Errorf("labnet: no node %q in the lab", node)
	}
	if pod == "" {
		return "", errors.New("labnet: empty pod name")
	}
	if err := n.checkPodAddr(addr); err != nil {
		return "", err
	}
	if err := n.RemovePod(node, pod); err != nil {
		return "", err
	}
	namespace = n.PodNamespace(node, pod)
	defer func() {
		if err != nil {
			if rerr := n.RemovePod(node, pod); rerr != nil {
				err = errors.Join(err, rerr)
			}
			err = fmt.Errorf("labnet: pod %s on %s: %w", pod, node, err)
		}
	}()
	if err := newNamedNS(namespace); err != nil {
		return namespace, err
	}
	return namespace, plugPod(m, namespace, podID(node, pod), addr)
}

func plugPod(node Member, namespace, link string, addr netip.Addr) error {
	nodeNS, err := netns.GetFromName(node.Namespace)
	if err != nil {
		return err
	}
	defer nodeNS.Close()
	nh, err := netlink.NewHandleAt(nodeNS)
	if err != nil {
		return err
	}
	defer nh.Close()
	if err := setForwarding(node.Namespace); err != nil {
		return err
	}
	return plugVeth(nh, "in "+node.Namespace, link, namespace, addr, node.Addr)
}

// plugVeth plugs the pod namespace podNamespace into the namespace of side
// (a node's, or the root namespace for a system pod): a veth pair link (on
// side) - eth0 (in the pod), with addr/32 on eth0, everything from the pod
// sent to link through the link-local next hop podGateway, and a route to
// addr/32 through link from src on side. It returns once both ends are up;
// where names side's namespace in errors.
func plugVeth(side *netlink.Handle, where, link, podNamespace string, addr, src netip.Addr) error {
	podNS, err := netns.GetFromName(podNamespace)
	if err != nil {
		return err
	}
	defer podNS.Close()
	ph, err := netlink.NewHandleAt(podNS)
	if err != nil {
		return err
	}
	defer ph.Close()

	lo, err := ph.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := ph.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	host, eth0, err := addVeth(side, ph, podNS, where, link, "eth0", addr)
	if err != nil {
		return err
	}
	gw := net.IP(podGateway.AsSlice())
	if err := neighbourGateway(ph, eth0, host, podGateway); err != nil {
		return err
	}
	if err := ph.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: gw}); err != nil {
		return fmt.Errorf("default route via %s: %w", podGateway, err)
	}
	if err := side.RouteAdd(&netlink.Route{
		LinkIndex: host.Attrs().Index, Dst: ipNet(addr, 32), Scope: netlink.SCOPE_LINK, Src: net.IP(src.AsSlice()),
	}); err != nil {
		return fmt.Errorf("route to %s %s: %w", addr, where, err)
	}

	deadline := time.Now().Add(readyTimeout)
	if err := pollOperUp(ph, "eth0", deadline); err != nil {
		return err
	}
	return pollOperUp(side, link, deadline)
}

// setForwarding turns on IPv4 forwarding inside the namespace: the sysctl
// files under /proc/sys/net belong to the network namespace of the thread
// that opens them.
func setForwarding(namespace string) error {
	return Do(namespace, func() error {
		const p = "/proc/sys/net/ipv4/ip_forward"
		if readSysctl(p) == "1" {
			return nil
		}
		if err := os.WriteFile(p, []byte("1"), 0); err != nil {
			return fmt.Errorf("%s in %s: %w", p, namespace, err)
		}
		return nil
	})
}

// RemovePod removes what [Network.AddPod] made for pod on node: the pod's
// namespace and the veth pair (its /32 route goes with it). It does not
// stop processes running in the namespace. It is idempotent.
func (n *Network) RemovePod(node, pod string) error {
	var errs []error
	if m, ok := n.node(node); ok {
		if err := deleteLinkIn(m.Namespace, podID(node, pod)); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, deleteNamedNS(n.PodNamespace(node, pod)))
	return errors.Join(errs...)
}

// deleteLinkIn deletes link name in the named namespace, if both exist.
func deleteLinkIn(namespace, name string) error {
	h, err := handleIn(namespace)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("labnet: open %s: %w", namespace, err)
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("labnet: find %s in %s: %w", name, namespace, err)
	}
	if err := h.LinkDel(l); err != nil {
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) && !errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("labnet: delete %s in %s: %w", name, namespace, err)
		}
	}
	return nil
}

// isolatePods keeps pod addresses out of the root namespace (see the pod
// namespace documentation above): unreachable routes in the client and node
// namespaces and rules for pod-sourced traffic in the node namespaces.
func (n *Network) isolatePods() error {
	if !n.PodSubnet.IsValid() {
		return nil
	}
	for _, m := range n.members() {
		if err := n.isolatePodsIn(m); err != nil {
			return fmt.Errorf("labnet: namespace %s: %w", m.Namespace, err)
		}
	}
	return nil
}

func (n *Network) isolatePodsIn(m Member) error {
	h, err := handleIn(m.Namespace)
	if err != nil {
		return err
	}
	defer h.Close()
	pods := ipNet(n.PodSubnet.Addr(), n.PodSubnet.Bits())
	if err := h.RouteAdd(&netlink.Route{Dst: pods, Type: unix.RTN_UNREACHABLE}); err != nil {
		return fmt.Errorf("unreachable route %s: %w", n.PodSubnet, err)
	}
	if m.Name == n.Client.Name {
		return nil
	}
	rule := func(prio int, dst *net.IPNet, unreachable bool) error {
		r := netlink.NewRule()
		r.Family = netlink.FAMILY_V4
		r.Priority = prio
		r.Src = pods
		r.Dst = dst
		if unreachable {
			r.Type = unix.RTN_UNREACHABLE
		} else {
			r.Table = unix.RT_TABLE_MAIN
		}
		if err := h.RuleAdd(r); err != nil {
			return fmt.Errorf("rule %d from %s: %w", prio, n.PodSubnet, err)
		}
		return nil
	}
	return errors.Join(
		rule(rulePrioPodToGateway, ipNet(n.Gateway(), 32), true),
		rule(rulePrioPodToLab, ipNet(n.Subnet.Addr(), n.Subnet.Bits()), false),
		rule(rulePrioPodToPods, pods, false),
		rule(rulePrioPodElsewhere, nil, true),
	)
}

// CutOff takes the node's namespace off the bridge, as a failed link or a
// powered-off machine would: the root-side end of its veth pair goes down,
// so the node reaches neither the API server nor the client, and nothing
// reaches the node or the pods behind it. [Network.Restore] undoes it.
func (n *Network) CutOff(node string) error {
	m, ok := n.node(node)
	if !ok {
		return fmt.Errorf("labnet: no node %q in the lab", node)
	}
	l, err := netlink.LinkByName(m.HostLink)
	if err != nil {
		return fmt.Errorf("labnet: %s: %w", m.HostLink, err)
	}
	if err := netlink.LinkSetDown(l); err != nil {
		return fmt.Errorf("labnet: set %s down: %w", m.HostLink, err)
	}
	return nil
}

// Restore puts a node cut off by [Network.CutOff] back on the bridge and
// waits until its link is up again.
func (n *Network) Restore(node string) error {
	m, ok := n.node(node)
	if !ok {
		return fmt.Errorf("labnet: no node %q in the lab", node)
	}
	l, err := netlink.LinkByName(m.HostLink)
	if err != nil {
		return fmt.Errorf("labnet: %s: %w", m.HostLink, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("labnet: set %s up: %w", m.HostLink, err)
	}
	if err := waitOperUp(n.Bridge(), []Member{m}, readyTimeout); err != nil {
		return err
	}
	return n.forgetUnresolved()
}

// forgetUnresolved deletes the neighbour entries that failed, or are still
// failing, to resolve on the lab's links (in the root namespace and in
// every lab namespace), e.g. while a node was cut off. Otherwise a packet
// sent just after Restore can join an entry whose probes are nearly used up
// and fail with "no route to host"; without the entry it starts afresh.
func (n *Network) forgetUnresolved() error {
	var errs []error
	br, err := netlink.LinkByName(n.Bridge())
	if err != nil {
		return fmt.Errorf("labnet: %w", err)
	}
	errs = append(errs, forgetUnresolvedOn(&netlink.Handle{}, br.Attrs().Index))
	for _, m := range n.members() {
		h, err := handleIn(m.Namespace)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if eth0, err := h.LinkByName("eth0"); err != nil {
			errs = append(errs, err)
		} else {
			errs = append(errs, forgetUnresolvedOn(h, eth0.Attrs().Index))
		}
		h.Close()
	}
	return errors.Join(errs...)
}

func forgetUnresolvedOn(h *netlink.Handle, linkIndex int) error {
	neighs, err := h.NeighList(linkIndex, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("labnet: list neighbours: %w", err)
	}
	for _, nb := range neighs {
		if nb.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) == 0 {
			continue
		}
		if err := h.NeighDel(&nb); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("labnet: delete neighbour %s: %w", nb.IP, err)
		}
	}
	return nil
}

// addVeth creates the veth pair link (on side) - peer (moved into the pod's
// namespace podNS, with addr/32 if addr is valid), and sets both ends up;
// where names side's namespace in errors.
func addVeth(side, ph *netlink.Handle, podNS netns.NsHandle, where, link, peer string, addr netip.Addr) (host, inPod netlink.Link, err error) {
	la := netlink.NewLinkAttrs()
	la.Name = link
	if err := side.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: peer, PeerNamespace: netlink.NsFd(int(podNS))}); err != nil {
		return nil, nil, fmt.Errorf("add veth %s %s: %w", link, where, err)
	}
	if host, err = side.LinkByName(link); err != nil {
		return nil, nil, err
	}
	if err := side.LinkSetUp(host); err != nil {
		return nil, nil, fmt.Errorf("set %s up: %w", link, err)
	}
	if inPod, err = ph.LinkByName(peer); err != nil {
		return nil, nil, err
	}
	if addr.IsValid() {
		if err := ph.AddrAdd(inPod, &netlink.Addr{IPNet: ipNet(addr, 32)}); err != nil {
			return nil, nil, fmt.Errorf("address %s on %s: %w", addr, peer, err)
		}
	}
	if err := ph.LinkSetUp(inPod); err != nil {
		return nil, nil, fmt.Errorf("set %s up: %w", peer, err)
	}
	return host, inPod, nil
}

// neighbourGateway makes the link-local next hop gw, on the pod's link
// inPod, the host end of the pair: a permanent neighbour entry with its
// hardware address, and a route to gw through inPod.
func neighbourGateway(ph *netlink.Handle, inPod, host netlink.Link, gw netip.Addr) error {
	if err := ph.NeighAdd(&netlink.Neigh{
		LinkIndex: inPod.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
		IP: net.IP(gw.AsSlice()), HardwareAddr: host.Attrs().HardwareAddr,
	}); err != nil {
		return fmt.Errorf("neighbour %s on %s: %w", gw, inPod.Attrs().Name, err)
	}
	if err := ph.RouteAdd(&netlink.Route{LinkIndex: inPod.Attrs().Index, Dst: ipNet(gw, 32), Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("route to %s: %w", gw, err)
	}
	return nil
}
