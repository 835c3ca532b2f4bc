package deployed

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/witnessguard"
	"github.com/kubext/kubext/internal/witnesskey"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/lab/labnet"
	"github.com/kubext/kubext/test/staticip"
)

// Witness failover as installed: the manager has made the agents' key, the
// agents mount it and reach each other on the node network, the admission
// policy lets an agent record its generation, and the partner reaches the
// holder at the address held on its witnesses' word. The agent, with its
// deployed privileges, has installed the whole hold gate on the holder's
// node, the egress gate included (a refused egress hook would only be a
// log line).
func TestDeployedWitnessHold(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	ctx := context.Background()
	c := adminClient(t)
	pods, err := theLab.StartPodNetwork(ctx)
	g.Expect(err).NotTo(HaveOccurred())

	// The manager makes the key when it starts.
	key := &corev1.Secret{}
	g.Eventually(func() error {
		return c.Get(ctx, client.ObjectKey{Namespace: lab.SystemNamespace, Name: "kubext-witness-key"}, key)
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Expect(key.Data[witnesskey.DataKey]).To(HaveLen(witnesskey.Size))

	addr := netip.MustParseAddr("203.0.113.114")
	staticip.WatchSplits(t, theLab.Net, addr)
	pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "deployed-witness"}, Spec: ipv1.IPPoolSpec{
		Addresses: []string{"203.0.113.112/29"}, Claimants: &ipv1.PoolClaimants{Namespaces: []string{"default"}},
		Failover: ipv1.FailoverWitness}}
	g.Expect(c.Create(ctx, pool)).To(Succeed())
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "witnessed"}, Spec: ipv1.IPSpec{Address: addr.String()}}
	g.Expect(c.Create(ctx, ip)).To(Succeed())
	dep := staticip.Deployment("witnessed-app", "witnessed", 2)
	g.Expect(c.Create(ctx, dep)).To(Succeed())
	t.Cleanup(func() {
		_ = c.Delete(ctx, dep)
		_ = c.Delete(ctx, ip)
		_ = c.Delete(ctx, pool)
	})
	var holder, node string
	g.Eventually(func(g Gomega) {
		got := &ipv1.IP{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "witnessed"}, got)).To(Succeed())
		g.Expect(staticip.Ready(got)).To(BeTrue(), "IP not Ready: %v", got.Status.Conditions)
		g.Expect(got.Status.Witnesses).NotTo(BeEmpty())
		g.Expect(got.Status.AttachedGeneration).To(BeNumerically(">", 0), "held on the Lease, not on the witnesses")
		holder, node = staticip.PodName(got.Status.Pod), got.Status.AttachedNode
	}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Eventually(func() (string, error) { return staticip.AskFrom(theLab.Net.ClientNamespace(), addr, time.Second) },
		30*time.Second, 100*time.Millisecond).Should(Equal(holder))
	g.Eventually(func() ([]string, error) { return egressGate(node, addr) }, 10*time.Second, 100*time.Millisecond).
		ShouldNot(BeEmpty(), "the egress gate on %s", node)

	// The witness port takes the node network only (the lab set the
	// ConfigMap's witness-allow-from, as config.yaml asks): the kernel
	// drops what a pod sends it, not what the node network does.
	nodeNS, err := netns.GetFromName(theLab.Net.NodeNamespace(node))
	g.Expect(err).NotTo(HaveOccurred())
	defer nodeNS.Close()
	outside, _, err := witnessguard.Dropped(int(nodeNS))
	g.Expect(err).NotTo(HaveOccurred(), "the guard's table on %s", node)
	witnessPort := netip.AddrPortFrom(theLab.Net.NodeAddr(node), lab.WitnessPort)
	g.Expect(sendDatagrams(pods.PodNamespace("default/"+holder), witnessPort, 5)).To(Succeed())
	g.Eventually(func() (uint64, error) {
		after, _, err := witnessguard.Dropped(int(nodeNS))
		return after - outside, err
	},
		5*time.Second, 100*time.Millisecond).Should(BeEquivalentTo(5), "a pod's datagrams to the witness port")
	g.Expect(sendDatagrams(theLab.Net.ClientNamespace(), witnessPort, 5)).To(Succeed())
	g.Consistently(func() (uint64, error) {
		after, _, err := witnessguard.Dropped(int(nodeNS))
		return after - outside, err
	},
		time.Second, 100*time.Millisecond).Should(BeEquivalentTo(5), "datagrams from the node network")
}

// sendDatagrams sends n junk datagrams to to from the network namespace.
func sendDatagrams(namespace string, to netip.AddrPort, n int) error {
	return labnet.Do(namespace, func() error {
		c, err := net.ListenPacket("udp", ":0")
		if err != nil {
			return err
		}
		defer c.Close()
		for range n {
			if _, err := c.WriteTo([]byte("not a witness message"), net.UDPAddrFromAddrPort(to)); err != nil {
				return err
			}
		}
		return nil
	})
}

// egressGate returns the uplinks whose egress chain of table netdev kubext
// runs on node, if that table holds addr (none otherwise).
func egressGate(node string, addr netip.Addr) ([]string, error) {
	ns, err := netns.GetFromName(theLab.Net.NodeNamespace(node))
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.CloseLasting() }()
	table := &nftables.Table{Name: "kubext", Family: nftables.TableFamilyNetdev}
	held, err := c.GetSetByName(table, "held4")
	if err != nil {
		return nil, fmt.Errorf("netdev kubext on %s: %w", node, err)
	}
	elems, err := c.GetSetElements(held)
	if err != nil || !slices.ContainsFunc(elems, func(e nftables.SetElement) bool { return bytes.Equal(e.Key, addr.AsSlice()) }) {
		return nil, err
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if err != nil {
		return nil, err
	}
	var uplinks []string
	for _, ch := range chains {
		if uplink, ok := strings.CutPrefix(ch.Name, "egress-"); ok && ch.Table.Name == table.Name && ch.Hooknum != nil && *ch.Hooknum == *nftables.ChainHookEgress {
			uplinks = append(uplinks, uplink)
		}
	}
	return uplinks, nil
}
