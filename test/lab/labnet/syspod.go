package labnet

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
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
// stops no processes and is idempotent.
func (n *Network) RemoveSystemPod(pod string) error {
	name := n.SystemPodNamespace(pod)
	var errs []error
	if l, err := netlink.LinkByName(name); err == nil {
		errs = append(errs, deleteLink(l))
	}
	return errors.Join(append(errs, deleteNamedNS(name))...)
}
