package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/lab/labnet"
	"github.com/kubext/kubext/test/staticip"
)

// staticIPStack is the manager, one ip-agent per node and the lab's pod
// network, started once for the package by the first test that needs them.
type staticIPStack struct {
	c       client.Client
	manager *lab.Manager
	agents  map[string]*lab.Process
	pods    *lab.PodNetwork
}

var (
	witnessArgs []string
	stackOnce   sync.Once
	stack       *staticIPStack
	stackErr    error
)

func staticIP(t *testing.T) *staticIPStack {
	t.Helper()
	rootOnly(t)
	stackOnce.Do(func() { stack, stackErr = startStaticIP(context.Background()) })
	if stackErr != nil {
		t.Fatal(stackErr)
	}
	return stack
}

func startStaticIP(ctx context.Context) (*staticIPStack, error) {
	s := &staticIPStack{agents: map[string]*lab.Process{}}
	var err error
	if s.c, err = staticip.NewClient(theLab); err != nil {
		return nil, err
	}
	if s.manager, err = theLab.StartManager(ctx, "manager", managerArgs...); err != nil {
		return nil, err
	}
	// Every agent takes part in the witness protocol: pools with failover
	// Witness use it, the others hold on the Lease as before.
	if witnessArgs, err = theLab.WitnessArgs(); err != nil {
		return nil, err
	}
	for _, n := range theLab.Nodes {
		if s.agents[n], err = theLab.StartIPAgent(ctx, n, witnessArgs...); err != nil {
			return nil, err
		}
	}
	if s.pods, err = theLab.StartPodNetwork(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// managerArgs run the static IP controllers; a crashed leader is replaced
// after 4 s instead of 15 s, so the restart rounds stay short.
var managerArgs = []string{"--controllers=ip,ippool", "--leader-elect-lease-duration=4s",
	"--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}

// The subnet of the e2e lab's bridge; static IPs come from its .96/28.
const (
	e2ePool = "203.0.113.96/28"
)

// defaultClaimants lets the pods of the default namespace claim a pool's
// IPs; without claimants no pod may claim them.
func defaultClaimants() *ipv1.PoolClaimants {
	return &ipv1.PoolClaimants{Namespaces: []string{"default"}}
}

// ensureE2EPool creates the pool the e2e tests share (another test may
// have made it).
func (s *staticIPStack) ensureE2EPool(g Gomega) {
	pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "e2e"},
		Spec: ipv1.IPPoolSpec{Addresses: []string{e2ePool}, Claimants: defaultClaimants()}}
	if err := s.c.Create(context.Background(), pool); err != nil {
		g.Expect(apierrors.IsAlreadyExists(err)).To(BeTrue(), "%v", err)
	}
}

func (s *staticIPStack) ip(g Gomega, name string) *ipv1.IP {
	ip := &ipv1.IP{}
	g.Expect(s.c.Get(context.Background(), client.ObjectKey{Name: name}, ip)).To(Succeed())
	return ip
}

// answersOn lists the node namespaces that have the address configured.
func answersOn(addr netip.Addr) []string {
	var nodes []string
	for _, n := range theLab.Nodes {
		_ = labnet.Do(theLab.Net.NodeNamespace(n), func() error {
			addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
			if err != nil {
				return err
			}
			for _, a := range addrs {
				if a.IP.Equal(addr.AsSlice()) {
					nodes = append(nodes, n)
				}
			}
			return nil
		})
	}
	return nodes
}

// The address answers from the holder pod in both directions, moves to the
// standby when the holder's node dies, and the dead node stays silent when
// it comes back.
func TestStaticIPAnswersBothWaysAndFailsOver(t *testing.T) {
	s := staticIP(t)
	g := NewWithT(t)
	ctx := context.Background()
	addr := netip.MustParseAddr("203.0.113.100")
	staticip.WatchSplits(t, theLab.Net, addr)

	s.ensureE2EPool(g)
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "partner"}, Spec: ipv1.IPSpec{Address: addr.String()}}
	g.Expect(s.c.Create(ctx, ip)).To(Succeed())
	dep := staticip.Deployment("partner-app", "partner", 2)
	g.Expect(s.c.Create(ctx, dep)).To(Succeed())
	t.Cleanup(func() {
		_ = s.c.Delete(ctx, dep)
		_ = s.c.Delete(ctx, ip)
	})

	var holder, standby, holderNode string
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, "partner")
		g.Expect(staticip.Ready(ip)).To(BeTrue(), "IP not Ready: %v", ip.Status.Conditions)
		g.Expect(ip.Status.Standbys).To(HaveLen(1))
		holder, standby, holderNode = staticip.PodName(ip.Status.Pod), staticip.PodName(ip.Status.Standbys[0]), ip.Status.Node
	}, time.Minute, 200*time.Millisecond).Should(Succeed())

	// In: the client reaches the holder at the fixed address.
	g.Eventually(func() (string, error) { return staticip.AskFrom(theLab.Net.ClientNamespace(), addr, time.Second) }, 20*time.Second, 100*time.Millisecond).Should(Equal(holder))
	g.Expect(answersOn(addr)).To(Equal([]string{holderNode}))

	// Out: the holder's own connections reach the client from the fixed
	// address.
	g.Expect(staticip.SourceSeenByClient(theLab, s.pods, "default/"+holder)).To(Equal(addr.String()))

	// The holder's node dies: agent gone, network cut, NotReady.
	g.Expect(theLab.KillNode(ctx, holderNode)).To(Succeed())
	start := time.Now()
	t.Logf("killed %s at %s", holderNode, start.UTC().Format("15:04:05.000"))
	g.Eventually(func() (string, error) {
		return staticip.AskFrom(theLab.Net.ClientNamespace(), addr, 100*time.Millisecond)
	}, 30*time.Second, 50*time.Millisecond).Should(Equal(standby))
	t.Logf("the standby answered %s after the holder's node was killed", time.Since(start).Round(10*time.Millisecond))
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, "partner")
		g.Expect(staticip.PodName(ip.Status.Pod)).To(Equal(standby))
		g.Expect(staticip.Ready(ip)).To(BeTrue())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	// The dead node comes back without its lease: it must not answer.
	g.Expect(theLab.ReviveNode(ctx, holderNode)).To(Succeed())
	t.Logf("revived %s at %s, %s after it was killed", holderNode, time.Now().UTC().Format("15:04:05.000"), time.Since(start).Round(time.Millisecond))
	agent, err := theLab.StartIPAgent(ctx, holderNode, witnessArgs...)
	g.Expect(err).NotTo(HaveOccurred())
	s.agents[holderNode] = agent
	g.Consistently(func(g Gomega) {
		g.Expect(answersOn(addr)).To(HaveLen(1))
		g.Expect(answersOn(addr)).NotTo(ContainElement(holderNode))
		g.Expect(staticip.AskFrom(theLab.Net.ClientNamespace(), addr, time.Second)).To(Equal(standby))
	}, 3*time.Second, 250*time.Millisecond).Should(Succeed())
}

// Restarting the manager and the agents in the middle of moves loses
// nothing: the address ends on exactly one node, the holder's, and no
// reservation leaks.
func TestStaticIPSurvivesRestartsMidMove(t *testing.T) {
	s := staticIP(t)
	g := NewWithT(t)
	ctx := context.Background()
	addr := netip.MustParseAddr("203.0.113.101")
	staticip.WatchSplits(t, theLab.Net, addr)
	pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "e2e-restarts"},
		Spec: ipv1.IPPoolSpec{Addresses: []string{"203.0.113.101/32"}, Claimants: defaultClaimants()}}
	g.Expect(s.c.Create(ctx, pool)).To(Succeed())
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "restarts"}, Spec: ipv1.IPSpec{Pool: "e2e-restarts"}}
	g.Expect(s.c.Create(ctx, ip)).To(Succeed())
	dep := staticip.Deployment("restarts-app", "restarts", 2)
	g.Expect(s.c.Create(ctx, dep)).To(Succeed())
	t.Cleanup(func() {
		_ = s.c.Delete(ctx, dep)
		_ = s.c.Delete(ctx, ip)
		_ = s.c.Delete(ctx, pool)
	})
	g.Eventually(func(g Gomega) {
		ip := s.ip(g, "restarts")
		g.Expect(staticip.Ready(ip)).To(BeTrue())
		g.Expect(ip.Status.Address).To(Equal(addr.String()))
		g.Expect(ip.Status.Standbys).To(HaveLen(1))
	}, time.Minute, 200*time.Millisecond).Should(Succeed())

	for round := range 3 {
		cur := s.ip(g, "restarts")
		from, to := cur.Status.Node, cur.Status.Standbys[0]
		t.Logf("round %d: moving from %s on %s to %s", round, cur.Status.Pod, from, to)
		// Ask for a move, then crash the manager and the old node's agent
		// while it is under way, and start them again.
		patch := client.RawPatch("application/merge-patch+json",
			[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, ipv1.AnnotationMoveTo, to)))
		g.Expect(s.c.Patch(ctx, cur, patch)).To(Succeed())
		time.Sleep(time.Duration(round*40) * time.Millisecond)
		s.manager.Kill()
		s.agents[from].Kill()
		var err error
		s.manager, err = theLab.StartManager(ctx, "manager", managerArgs...)
		g.Expect(err).NotTo(HaveOccurred())
		s.agents[from], err = theLab.StartIPAgent(ctx, from, witnessArgs...)
		g.Expect(err).NotTo(HaveOccurred())

		g.Eventually(func(g Gomega) {
			ip := s.ip(g, "restarts")
			g.Expect(staticip.Ready(ip)).To(BeTrue())
			g.Expect(ip.Status.AttachedNode).To(Equal(ip.Status.Node))
			g.Expect(answersOn(addr)).To(Equal([]string{ip.Status.Node}))
			g.Expect(staticip.AskFrom(theLab.Net.ClientNamespace(), addr, time.Second)).To(Equal(staticip.PodName(ip.Status.Pod)))
			g.Expect(ip.Status.Pod).To(Equal(to), "the requested move happened")
		}, time.Minute, 200*time.Millisecond).Should(Succeed(), "round %d", round)
	}
	// One reservation, the IP's.
	list := &networkingv1.IPAddressList{}
	g.Expect(s.c.List(ctx, list, client.MatchingLabels{ipv1.LabelPool: "e2e-restarts"})).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1))
	g.Expect(list.Items[0].Name).To(Equal(addr.String()))
}

// Fifty clients create IPs for one address at the same instant: the API
// server gives it to exactly one; each of the others says who holds it.
func TestStaticIPConcurrentCreationsOfOneAddress(t *testing.T) {
	s := staticIP(t)
	g := NewWithT(t)
	ctx := context.Background()
	s.ensureE2EPool(g)
	const n = 50
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("race-%02d", i)}, Spec: ipv1.IPSpec{Address: "203.0.113.105"}}
			if err := s.c.Create(ctx, ip); err != nil {
				t.Errorf("creating %s: %v", ip.Name, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	t.Cleanup(func() {
		for i := range n {
			_ = s.c.Delete(ctx, &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("race-%02d", i)}})
		}
	})
	g.Eventually(func(g Gomega) {
		list := &ipv1.IPList{}
		g.Expect(s.c.List(ctx, list)).To(Succeed())
		holders, refused := 0, 0
		for _, ip := range list.Items {
			if !strings.HasPrefix(ip.Name, "race-") {
				continue
			}
			c := meta.FindStatusCondition(ip.Status.Conditions, ipv1.ConditionAllocated)
			g.Expect(c).NotTo(BeNil(), ip.Name)
			switch {
			case c.Status == metav1.ConditionTrue:
				holders++
			case c.Reason == ipv1.ReasonAddressInUse:
				refused++
				g.Expect(c.Message).To(MatchRegexp(`203\.0\.113\.105 is already reserved by ips\.ip\.kubext\.io race-\d\d`))
			}
		}
		g.Expect(holders).To(Equal(1))
		g.Expect(refused).To(Equal(n - 1))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
}
