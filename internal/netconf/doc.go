// Package netconf programs one node's kernel for the static IPs the node
// holds with the l2 provider, so that each address answers on the node
// running its holder pod, and traffic in and out of the pod uses it.
//
// A [Dataplane] takes the desired state (a list of [Assignment]s) and
// converges the kernel of one network namespace to it. For each assignment
// it programs:
//
//   - The address, as a /32 or /128 on the uplink interface, so the node
//     answers ARP / neighbour solicitations for it. See "Ownership" below for
//     how the address is marked.
//   - An announcement at once (gratuitous ARP, or an unsolicited neighbour
//     advertisement with the override flag), repeated on a short schedule:
//     waiting for a periodic announcement is what makes kube-vip's failover
//     seconds slower than it needs to be.
//   - Ingress: DNAT of traffic to the address to the pod, from a map in the
//     nftables table (family inet) "kubext" (prerouting, and output for
//     traffic the node itself sends to the address). The client's own
//     source address reaches the pod.
//   - Egress: SNAT of the pod's traffic to the address when it leaves
//     through the uplink, except towards Options.ExcludeSNAT (the cluster's
//     own pod and service ranges), plus a policy routing rule "from <pod>
//     lookup <uplink table>" so that the pod's traffic leaves through the
//     interface that holds the address, where the replies come back.
//   - conntrack: flows of an address that was added, moved or removed are
//     deleted, so no stale NAT binding keeps sending a flow from the old
//     node, or keeps a pod's flows on the source they had before it became
//     the holder.
//
// # Ownership
//
// The agent keeps no local state: everything kubext programmed is
// recognised in the kernel after a restart, and nothing else is ever
// touched.
//
//   - Addresses carry the address protocol [AddressProtocol] (IFA_PROTO,
//     Linux 5.18 or later; "ip address show proto 107"), and IPv4
//     addresses also the label "<interface>:kx" when that fits in 15
//     characters, which is also how they are recognised on older kernels.
//   - The nftables table named by Options.TableName belongs to kubext as a
//     whole; its maps are the record of which pod each address leads to.
//   - Routing rules with priority Options.RulePriority that look up a table
//     in kubext's range, and every route in that range (one table per
//     uplink: Options.RouteTableBase + the uplink's interface index). Routes
//     and rules also carry the protocol [AddressProtocol].
//
// # Fencing
//
// Fence removes everything at once without waiting for an Apply under way,
// and refuses every later add until Unfence; an Apply that was under way
// adds nothing, even after Unfence (fence.go has the argument). Refresh
// never waits for an Apply either. With Options.AddressLifetime the kernel
// itself removes addresses and NAT map elements that are not refreshed in
// time, which covers an agent too frozen to fence.
//
// Only one Dataplane (one agent) may program a network namespace. A new
// Dataplane announces every address again on its first Apply, since it
// cannot know whether the process before it finished announcing.
//
// # Kernel settings
//
// DNAT to a pod behind a veth forwards packets, so Apply turns on
// net.ipv4.ip_forward (and net.ipv6.conf.all.forwarding when it holds IPv6
// addresses) in the namespace it programs, never elsewhere; a Kubernetes
// node forwards already. It never turns forwarding off again, since other
// components depend on it. Turning on IPv6 forwarding makes the kernel
// ignore router advertisements on interfaces with accept_ra=1: a node that
// learns its IPv6 default route from them needs accept_ra=2.
//
// Forwarded traffic must also be allowed by the node's filter rules (a DROP
// policy in a FORWARD chain wins over anything kubext could accept); kubext
// adds no filter rules.
//
// arp_ignore and arp_announce: the address sits on the uplink itself, so
// the node answers ARP for it with arp_ignore 0 (the default) or 1. With
// arp_announce 0 the node may use the static address as the sender of its
// own ARP requests for traffic SNATed to it, which is correct for as long
// as it holds the address; the address is removed (and the NAT flows
// flushed) before another node takes over. rp_filter: pod traffic enters
// on the pod's veth and leaves through the uplink the rule selects, and
// replies come back on the uplink, so strict reverse path filtering holds.
//
// # Kernel requirements
//
// nf_tables with NAT in the inet family (Linux 5.2 or later; nft_nat,
// nft_ct, nf_nat, nf_conntrack), nf_conntrack_netlink to delete flows,
// policy routing (IP_MULTIPLE_TABLES, IPV6_MULTIPLE_TABLES), packet sockets
// (AF_PACKET) for gratuitous ARP, IFA_PROTO (Linux 5.18) for IPv6
// address ownership, and the netdev egress hook (Linux 5.16,
// CONFIG_NETFILTER_EGRESS) for the hold gate's egress check (egress.go;
// without it the rest of the gate works and the log says what is
// missing). The caller needs CAP_NET_ADMIN and CAP_NET_RAW in the
// namespace, and CAP_SYS_ADMIN to enter another one (Options.NetNSPath).
//
// The NAT chains run just before kube-proxy's and most CNIs' NAT chains
// (priorities dstnat-10 and srcnat-10), because the first NAT binding
// decided for a connection wins. Datapaths that bypass netfilter (eBPF
// kube-proxy replacements) are not covered.
package netconf
