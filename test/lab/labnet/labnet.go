// Package labnet builds the network half of the kubext lab: a Linux bridge in
// the root network namespace plus one named network namespace per simulated
// node and one for an outside "client", all on one documentation /24.
//
// Layout for prefix P and subnet S (for example "kx" and 192.0.2.0/24):
//
//	root ns:    bridge P-br, address S.1/24 (the gateway; API forwarder listens here)
//	P-n<i>:     eth0 = S.(10+i)/24 for Nodes[i] (i from 0), default route via S.1
//	P-client:   eth0 = S.200/24, default route via S.1
//	P-p<hash>:  a pod's namespace behind its node's (see [Network.AddPod])
//
// The root-side veth ends are P-v<i> and P-vc, enslaved to P-br. The bridge is a
// plain L2 segment (no proxy ARP), so addresses such as S.100-S.199 that node
// agents add to their eth0 later are resolved by ordinary ARP from the client.
//
// Everything needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN). All objects are
// found again by name, so a later process can tear a lab down with
// [Destroy] knowing only the prefix.
package labnet

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// MaxPrefixLen is the longest allowed prefix; it keeps every interface name
// ("<prefix>-v<i>") within the kernel's 15-character limit.
const MaxPrefixLen = 6

// MaxNodes is the largest number of node namespaces; node addresses S.10 to
// S.99 stay below the range S.100-S.199 kept free for static IPs.
const MaxNodes = 90

// netnsDir is where named network namespaces are bind-mounted, as by `ip netns add`.
const netnsDir = "/run/netns"

const (
	firstNodeHost = 10
	clientHost    = 200
	gatewayHost   = 1
)

// documentationSubnets are the only subnets a lab may use (RFC 5737), so lab
// traffic can never be mistaken for, or routed to, a real network.
var documentationSubnets = []netip.Prefix{
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
}

// Config describes the lab network to build with [Create].
type Config struct {
	// Prefix starts every namespace and link name ("<Prefix>-..."); 1 to
	// MaxPrefixLen lowercase letters or digits, starting with a letter.
	Prefix string
	// Subnet is the lab's /24; one of 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24.
	Subnet netip.Prefix
	// Nodes are the Kubernetes node names in order; Nodes[i] gets namespace
	// "<Prefix>-n<i>" and address S.(10+i).
	Nodes []string
	// PodSubnet, if set, is where pod addresses come from ([Network.AddPod]
	// needs it): a network inside one of the documentation /24s that does
	// not overlap Subnet (see [ValidatePodSubnet]). It is never used in the
	// root namespace; the client and node namespaces get routes that keep
	// traffic to and from pod addresses out of it.
	PodSubnet netip.Prefix
	// Keep makes the network outlive the process that creates it (the lab
	// CLI's). Otherwise the network is that process's: its bridge records
	// the process, and a later Create that finds the subnet held by the
	// network of a process that is gone removes it first.
	Keep bool
}

// Member is one namespace attached to the lab bridge; it records names only
// (no file descriptors) so it survives a round trip through JSON.
type Member struct {
	// Name is the Kubernetes node name, or "client" for the client namespace.
	Name string `json:"name"`
	// Namespace is the named network namespace (a file under /run/netns).
	Namespace string `json:"namespace"`
	// Addr is the address of eth0 inside Namespace.
	Addr netip.Addr `json:"addr"`
	// HostLink is the root-namespace end of the veth pair, a port of the bridge.
	HostLink string `json:"hostLink"`
}

// Network is what [Create] built. It is JSON-serialisable so a CLI can save it
// in a state file and a later process can use it or pass Prefix to [Destroy].
type Network struct {
	// Prefix is the name prefix every namespace and link of this lab starts with.
	Prefix string `json:"prefix"`
	// Subnet is the lab's /24.
	Subnet netip.Prefix `json:"subnet"`
	// Nodes are the node namespaces, in the order of Config.Nodes.
	Nodes []Member `json:"nodes"`
	// Client is the namespace of the outside party.
	Client Member `json:"client"`
	// PodSubnet is Config.PodSubnet (zero when pods are not used).
	PodSubnet netip.Prefix `json:"podSubnet"`
	// BridgeNetfilter is true when the host's global
	// net.bridge.bridge-nf-call-iptables is on, so bridged lab traffic also
	// passes the host's iptables FORWARD chain; a host with FORWARD policy
	// DROP (e.g. Docker's) then needs an ACCEPT rule for the bridge.
	BridgeNetfilter bool `json:"bridgeNetfilter"`
}

// ValidatePrefix reports whether prefix can name a lab: it must be short
// enough for interface names and safe to use as a name filter in [Destroy].
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return errors.New("labnet: empty prefix")
	}
	if len(prefix) > MaxPrefixLen {
		return fmt.Errorf("labnet: prefix %q is longer than %d characters", prefix, MaxPrefixLen)
	}
	for i, r := range prefix {
		switch {
		case r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return fmt.Errorf("labnet: prefix %q must be lowercase letters and digits, starting with a letter", prefix)
		}
	}
	return nil
}

// ValidateSubnet reports whether subnet is one of the three RFC 5737
// documentation /24s, the only ones a lab may use.
func ValidateSubnet(subnet netip.Prefix) error {
	for _, d := range documentationSubnets {
		if subnet == d {
			return nil
		}
	}
	return fmt.Errorf("labnet: subnet %s is not allowed; use one of 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24", subnet)
}

// Validate checks the whole configuration without touching the system, so a
// CLI can reject bad flags before it needs root.
func (c Config) Validate() error {
	if err := ValidatePrefix(c.Prefix); err != nil {
		return err
	}
	if err := ValidateSubnet(c.Subnet); err != nil {
		return err
	}
	if c.PodSubnet.IsValid() {
		if err := ValidatePodSubnet(c.PodSubnet, c.Subnet); err != nil {
			return err
		}
	} else if c.PodSubnet != (netip.Prefix{}) {
		return errors.New("labnet: invalid pod subnet")
	}
	if len(c.Nodes) > MaxNodes {
		return fmt.Errorf("labnet: %d nodes, at most %d allowed", len(c.Nodes), MaxNodes)
	}
	seen := make(map[string]bool, len(c.Nodes))
	for _, n := range c.Nodes {
		if n == "" {
			return errors.New("labnet: empty node name")
		}
		if n == "client" {
			return errors.New(`labnet: node name "client" is reserved`)
		}
		if seen[n] {
			return fmt.Errorf("labnet: duplicate node name %q", n)
		}
		seen[n] = true
	}
	return nil
}

// hostAddr returns S.host for the /24 subnet.
func hostAddr(subnet netip.Prefix, host byte) netip.Addr {
	a := subnet.Masked().Addr().As4()
	a[3] = host
	return netip.AddrFrom4(a)
}

// plan computes the Network for cfg without creating anything.
func plan(cfg Config) *Network {
	n := &Network{
		Prefix:    cfg.Prefix,
		Subnet:    cfg.Subnet,
		PodSubnet: cfg.PodSubnet,
		Client: Member{
			Name:      "client",
			Namespace: cfg.Prefix + "-client",
			Addr:      hostAddr(cfg.Subnet, clientHost),
			HostLink:  cfg.Prefix + "-vc",
		},
	}
	for i, name := range cfg.Nodes {
		n.Nodes = append(n.Nodes, Member{
			Name:      name,
			Namespace: fmt.Sprintf("%s-n%d", cfg.Prefix, i),
			Addr:      hostAddr(cfg.Subnet, byte(firstNodeHost+i)),
			HostLink:  fmt.Sprintf("%s-v%d", cfg.Prefix, i),
		})
	}
	return n
}

// Create builds the lab network described by cfg. It first removes leftovers
// with the same prefix (so running it twice works) and, if building fails,
// removes what it made.
func Create(cfg Config) (*Network, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := Destroy(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("labnet: removing leftovers: %w", err)
	}
	if err := claimSubnet(cfg.Prefix, cfg.Subnet); err != nil {
		return nil, err
	}
	n := plan(cfg)
	if err := n.build(cfg.Keep); err != nil {
		if derr := Destroy(cfg.Prefix); derr != nil {
			err = errors.Join(err, fmt.Errorf("labnet: cleanup after failure: %w", derr))
		}
		return nil, err
	}
	return n, nil
}

func (n *Network) build(keep bool) error {
	gw := n.Gateway()
	br, err := createBridge(n.Bridge(), gw)
	if err != nil {
		return err
	}
	if !keep {
		o, err := currentOwner()
		if err != nil {
			return err
		}
		if err := netlink.LinkSetAlias(br, o.alias()); err != nil {
			return fmt.Errorf("labnet: alias of %s: %w", n.Bridge(), err)
		}
	}
	n.BridgeNetfilter = readSysctl("/proc/sys/net/bridge/bridge-nf-call-iptables") == "1"
	for _, m := range n.members() {
		if err := attach(br, m, gw); err != nil {
			return fmt.Errorf("labnet: namespace %s: %w", m.Namespace, err)
		}
	}
	if err := n.isolatePods(); err != nil {
		return err
	}
	return waitOperUp(n.Bridge(), n.members(), readyTimeout)
}

// readyTimeout bounds the wait for the kernel to report every lab link up.
const readyTimeout = 10 * time.Second

// waitOperUp waits until the bridge, every root-side veth and every eth0 are
// operationally up. The kernel attaches a link's real qdisc (until then it
// drops packets) in its link-watch work, which it may delay up to a second
// after carrier comes on; it sets the operational state in the same step.
// Without this wait the first packets after Create can be lost.
func waitOperUp(bridge string, members []Member, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, m := range members {
		h, err := handleIn(m.Namespace)
		if err != nil {
			return err
		}
		err = pollOperUp(h, "eth0", deadline)
		h.Close()
		if err != nil {
			return fmt.Errorf("labnet: namespace %s: %w", m.Namespace, err)
		}
		if err := pollOperUp(nil, m.HostLink, deadline); err != nil {
			return fmt.Errorf("labnet: %w", err)
		}
	}
	if err := pollOperUp(nil, bridge, deadline); err != nil {
		return fmt.Errorf("labnet: %w", err)
	}
	return nil
}

// pollOperUp polls link name through h (nil: the root namespace) until its
// operational state is up or the deadline passes.
func pollOperUp(h *netlink.Handle, name string, deadline time.Time) error {
	if h == nil {
		h = &netlink.Handle{}
	}
	for {
		l, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		if l.Attrs().OperState == netlink.OperUp {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("link %s not up (state %s)", name, l.Attrs().OperState)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// createBridge makes the bridge, gives it the gateway address and brings it up.
func createBridge(name string, gw netip.Addr) (netlink.Link, error) {
	mac, err := randomMAC()
	if err != nil {
		return nil, err
	}
	// A fixed MAC keeps the bridge from taking on (and changing with) the
	// lowest port MAC as ports come and go, which would stale ARP caches.
	la := netlink.NewLinkAttrs()
	la.Name = name
	la.HardwareAddr = mac
	br := &netlink.Bridge{LinkAttrs: la}
	if err := netlink.LinkAdd(br); err != nil {
		return nil, fmt.Errorf("labnet: add bridge %s: %w", name, err)
	}
	// Per-bridge netfilter switches: off, so this bridge does not itself ask
	// for bridged frames to be sent through iptables/ip6tables/arptables.
	// (Absent when the kernel has no br_netfilter support; nothing to do then.)
	for _, f := range []string{"nf_call_iptables", "nf_call_ip6tables", "nf_call_arptables"} {
		p := filepath.Join("/sys/class/net", name, "bridge", f)
		if _, err := os.Stat(p); err == nil {
			if err := os.WriteFile(p, []byte("0"), 0); err != nil {
				return nil, fmt.Errorf("labnet: %s: %w", p, err)
			}
		}
	}
	// Keep the bridge a plain L2 segment even if the host's default says otherwise.
	if p := filepath.Join("/proc/sys/net/ipv4/conf", name, "proxy_arp"); readSysctl(p) == "1" {
		if err := os.WriteFile(p, []byte("0"), 0); err != nil {
			return nil, fmt.Errorf("labnet: %s: %w", p, err)
		}
	}
	if err := netlink.AddrAdd(br, &netlink.Addr{IPNet: ipNet(gw, 24)}); err != nil {
		return nil, fmt.Errorf("labnet: address %s on %s: %w", gw, name, err)
	}
	if err := netlink.LinkSetUp(br); err != nil {
		return nil, fmt.Errorf("labnet: set %s up: %w", name, err)
	}
	return br, nil
}

// attach creates m's namespace and a veth pair whose root end is a port of br
// and whose other end is eth0 inside the namespace, then configures it.
func attach(br netlink.Link, m Member, gw netip.Addr) error {
	if err := newNamedNS(m.Namespace); err != nil {
		return err
	}
	ns, err := netns.GetFromName(m.Namespace)
	if err != nil {
		return err
	}
	defer ns.Close()

	la := netlink.NewLinkAttrs()
	la.Name = m.HostLink
	la.MasterIndex = br.Attrs().Index
	veth := &netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth %s: %w", m.HostLink, err)
	}
	host, err := netlink.LinkByName(m.HostLink)
	if err != nil {
		return err
	}
	if host.Attrs().MasterIndex != br.Attrs().Index {
		if err := netlink.LinkSetMaster(host, br); err != nil {
			return fmt.Errorf("enslave %s: %w", m.HostLink, err)
		}
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("set %s up: %w", m.HostLink, err)
	}

	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	if err := h.AddrAdd(eth0, &netlink.Addr{IPNet: ipNet(m.Addr, 24)}); err != nil {
		return fmt.Errorf("address %s on eth0: %w", m.Addr, err)
	}
	if err := h.LinkSetUp(eth0); err != nil {
		return fmt.Errorf("set eth0 up: %w", err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.IP(gw.AsSlice())}); err != nil {
		return fmt.Errorf("default route via %s: %w", gw, err)
	}
	return nil
}

// Destroy removes every network namespace and root-namespace link whose name
// starts with "<prefix>-", pod namespaces ("<prefix>-p...") included. It is idempotent and kills no processes; find those
// with [NamespacePIDs] before calling it, as namespaces cannot be found by name
// afterwards.
func Destroy(prefix string) error {
	if err := ValidatePrefix(prefix); err != nil {
		return err
	}
	pfx := prefix + "-"
	var errs []error

	links, err := linkList()
	if err != nil {
		errs = append(errs, fmt.Errorf("labnet: list links: %w", err))
	}
	// Ports first, bridges last; deleting a veth end removes its peer in the
	// node namespace too.
	var bridges []netlink.Link
	for _, l := range links {
		if !strings.HasPrefix(l.Attrs().Name, pfx) {
			continue
		}
		if l.Type() == "bridge" {
			bridges = append(bridges, l)
			continue
		}
		if err := deleteLink(l); err != nil {
			errs = append(errs, err)
		}
	}
	for _, l := range bridges {
		if err := deleteLink(l); err != nil {
			errs = append(errs, err)
		}
	}

	entries, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("labnet: %w", err))
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), pfx) {
			if err := deleteNamedNS(e.Name()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func deleteLink(l netlink.Link) error {
	err := netlink.LinkDel(l)
	var nf netlink.LinkNotFoundError
	if err == nil || errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return fmt.Errorf("labnet: delete link %s: %w", l.Attrs().Name, err)
}

// linkList lists root-namespace links, retrying a dump the kernel interrupted.
func linkList() ([]netlink.Link, error) {
	var err error
	for range 5 {
		var links []netlink.Link
		links, err = netlink.LinkList()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return links, err
		}
	}
	return nil, err
}

// ErrSubnetInUse means the lab's subnet is already used on this machine, by
// the host itself or by another lab.
var ErrSubnetInUse = errors.New("subnet already in use")

// claimSubnet makes sure no other link holds subnet, removing the networks
// of labs whose owner is gone (see owner.go) on the way.
func claimSubnet(prefix string, subnet netip.Prefix) error {
	for range 3 {
		err := checkSubnetFree(prefix, subnet)
		var held *subnetHeld
		if !errors.As(err, &held) || held.stalePrefix == "" {
			return err
		}
		fmt.Fprintf(os.Stderr, "labnet: removing lab network %q, left by a process that is gone (%v)\n", held.stalePrefix, err)
		if err := Destroy(held.stalePrefix); err != nil {
			return fmt.Errorf("labnet: removing a stale lab network: %w", err)
		}
	}
	return checkSubnetFree(prefix, subnet)
}

// subnetHeld is ErrSubnetInUse with what holds the subnet.
type subnetHeld struct {
	msg string
	// stalePrefix is the prefix of the lab network that holds the subnet
	// when its owner is gone ("" otherwise).
	stalePrefix string
}

func (e *subnetHeld) Error() string { return e.msg }
func (e *subnetHeld) Unwrap() error { return ErrSubnetInUse }

// checkSubnetFree refuses a subnet that a non-lab link of the root namespace
// already uses (address or route), e.g. another lab with a different prefix.
func checkSubnetFree(prefix string, subnet netip.Prefix) error {
	links, err := linkList()
	if err != nil {
		return fmt.Errorf("labnet: list links: %w", err)
	}
	names := map[int]string{}
	byIndex := map[int]netlink.Link{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
		byIndex[l.Attrs().Index] = l
	}
	held := func(idx int, format string, args ...any) error {
		e := &subnetHeld{msg: "labnet: " + ErrSubnetInUse.Error() + ": " + fmt.Sprintf(format, args...)}
		if l, ok := byIndex[idx]; ok {
			e.stalePrefix = staleNetworkPrefix(l)
		}
		return e
	}
	foreign := func(idx int) bool { return !strings.HasPrefix(names[idx], prefix+"-") }

	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return fmt.Errorf("labnet: list addresses: %w", err)
	}
	for _, a := range addrs {
		p, ok := toPrefix(a.IPNet)
		if ok && p.Overlaps(subnet) && foreign(a.LinkIndex) {
			return held(a.LinkIndex, "%s has address %s on %s", subnet, p, names[a.LinkIndex])
		}
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return fmt.Errorf("labnet: list routes: %w", err)
	}
	for _, r := range routes {
		p, ok := toPrefix(r.Dst)
		// Broader routes (e.g. a default route) lose to the lab's /24 and do not matter.
		if ok && p.Bits() >= subnet.Bits() && p.Overlaps(subnet) && foreign(r.LinkIndex) {
			return held(r.LinkIndex, "%s is routed as %s on %s", subnet, p, names[r.LinkIndex])
		}
	}
	return nil
}

// newNamedNS creates a named network namespace the way `ip netns add` does:
// a bind mount of a fresh namespace on /run/netns/<name>.
func newNamedNS(name string) error {
	if err := prepareNetnsDir(); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		// netns.NewNamed switches this thread into the new namespace; switch
		// it back before unlocking. If that fails the thread stays locked and
		// is discarded when the goroutine ends. (Restoring matters even then:
		// on the main thread Go cannot discard it, and /proc/<pid>/ns/net,
		// which NamespacePIDs reads, follows the main thread.)
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		h, err := netns.NewNamed(name)
		if err == nil {
			h.Close()
		}
		if serr := netns.Set(orig); serr == nil {
			runtime.UnlockOSThread()
		} else {
			err = errors.Join(err, fmt.Errorf("switch back to the original namespace: %w", serr))
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		_ = os.Remove(filepath.Join(netnsDir, name)) // NewNamed may leave the mount point behind
		return fmt.Errorf("create netns %s: %w", name, err)
	}
	return nil
}

// prepareNetnsDir makes /run/netns a shared mount point, as iproute2 does, so
// namespaces created later are visible in mount namespaces made from this one
// (e.g. by `ip netns exec`).
func prepareNetnsDir() error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return fmt.Errorf("labnet: %w", err)
	}
	err := unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		// Not a mount point yet: bind it onto itself, then make it shared.
		if err = unix.Mount(netnsDir, netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err == nil {
			err = unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		}
	}
	if err != nil {
		return fmt.Errorf("labnet: make %s a shared mount: %w", netnsDir, err)
	}
	return nil
}

// deleteNamedNS removes the bind mount and file of a named namespace, like
// `ip netns delete`; the namespace itself lives on while processes use it.
func deleteNamedNS(name string) error {
	p := filepath.Join(netnsDir, name)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("labnet: unmount %s: %w", p, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("labnet: %w", err)
	}
	return nil
}

// NodeNamespace returns the network namespace of the named Kubernetes node,
// or "" if the node is not part of the lab.
func (n *Network) NodeNamespace(node string) string {
	if m, ok := n.node(node); ok {
		return m.Namespace
	}
	return ""
}

// NodeAddr returns the eth0 address of the named node's namespace, or the
// zero Addr if the node is not part of the lab.
func (n *Network) NodeAddr(node string) netip.Addr {
	if m, ok := n.node(node); ok {
		return m.Addr
	}
	return netip.Addr{}
}

func (n *Network) node(name string) (Member, bool) {
	for _, m := range n.Nodes {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}

// ClientNamespace returns the namespace of the outside party, from which
// tests reach services the way a client off the cluster would.
func (n *Network) ClientNamespace() string { return n.Client.Namespace }

// ClientAddr returns the client namespace's eth0 address (S.200).
func (n *Network) ClientAddr() netip.Addr { return n.Client.Addr }

// Bridge returns the name of the Linux bridge in the root namespace
// ("<prefix>-br"), e.g. for binding the forwarder to it.
func (n *Network) Bridge() string { return n.Prefix + "-br" }

// Namespaces returns every namespace of the lab, nodes first and the client
// last, e.g. for killing leftover processes with [NamespacePIDs] at teardown.
func (n *Network) Namespaces() []string {
	var out []string
	for _, m := range n.members() {
		out = append(out, m.Namespace)
	}
	return out
}

func (n *Network) members() []Member {
	return append(append([]Member(nil), n.Nodes...), n.Client)
}

// Gateway returns S.1, the bridge's address in the root namespace: the
// namespaces' default route and the address the API-server forwarder listens on.
func (n *Network) Gateway() netip.Addr { return hostAddr(n.Subnet, gatewayHost) }

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, a.BitLen())}
}

func toPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}

func randomMAC() (net.HardwareAddr, error) {
	mac := make(net.HardwareAddr, 6)
	if _, err := rand.Read(mac); err != nil {
		return nil, err
	}
	mac[0] = (mac[0] | 0x02) &^ 0x01 // locally administered, unicast
	return mac, nil
}

func readSysctl(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
