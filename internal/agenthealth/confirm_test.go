package agenthealth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kubext/kubext/internal/heartbeat"
)

// countingAPI is a fake API server that counts the Lease reads made of it
// and can hold them until released.
type countingAPI struct {
	client.WithWatch
	gets, lists atomic.Int32
	hold        chan struct{} // while open, reads wait
	failList    error
}

func newCountingAPI() *countingAPI {
	a := &countingAPI{hold: make(chan struct{})}
	close(a.hold)
	base := fake.NewClientBuilder().Build()
	a.WithWatch = interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			a.gets.Add(1)
			<-a.hold
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			a.lists.Add(1)
			<-a.hold
			if a.failList != nil {
				return a.failList
			}
			return c.List(ctx, list, opts...)
		},
	})
	return a
}

// waiting is how many Lost calls wait for the round in flight.
func (t *Tracker) waiting() int { return t.callersOf(func(rs *rounds) *round { return rs.inFlight }) }

// nextWaiting is how many Lost calls wait for the next round.
func (t *Tracker) nextWaiting() int { return t.callersOf(func(rs *rounds) *round { return rs.next }) }

func (t *Tracker) callersOf(which func(*rounds) *round) int {
	t.rounds.mu.Lock()
	defer t.rounds.mu.Unlock()
	if r := which(&t.rounds); r != nil {
		return r.callers
	}
	return 0
}

type lostAnswer struct {
	node string
	lost bool
	err  error
}

func askLost(ctx context.Context, tr *Tracker, nodes []string) <-chan lostAnswer {
	out := make(chan lostAnswer, len(nodes))
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			lost, err := tr.Lost(ctx, n)
			out <- lostAnswer{n, lost, err}
		})
	}
	go func() { wg.Wait(); close(out) }()
	return out
}

// Every IP of a node that looks lost asks Lost, every 250 ms: callers that
// ask while a read of that node is under way share it, instead of sending
// one read each to an API server that may be overloaded already.
func TestLostShareOneReadPerNode(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	api := newCountingAPI()
	tr, clock := newReadingTracker(api)
	l := agentLease("n1", clock.Now(), 2)
	g.Expect(api.Create(ctx, l.DeepCopy())).To(Succeed())
	tr.Observe(l)
	clock.Step(3 * time.Second)

	api.hold = make(chan struct{})
	const callers = 50
	nodes := make([]string, callers)
	for i := range nodes {
		nodes[i] = "n1"
	}
	answers := askLost(ctx, tr, nodes)
	g.Eventually(tr.waiting).Should(Equal(callers), "every caller joins the read in flight")
	close(api.hold)
	for a := range answers {
		g.Expect(a.err).NotTo(HaveOccurred())
		g.Expect(a.lost).To(BeTrue())
	}
	g.Expect(api.gets.Load()).To(BeEquivalentTo(1))

	// A caller never takes the answer of a read that ended before it
	// asked: the agent renews, and the next call reads again.
	g.Expect(api.Get(ctx, client.ObjectKeyFromObject(l), l)).To(Succeed())
	l.Spec.RenewTime.Time = clock.Now()
	g.Expect(api.Update(ctx, l)).To(Succeed())
	api.gets.Store(0)
	g.Expect(tr.Lost(ctx, "n1")).To(BeFalse())
	g.Expect(api.gets.Load()).To(BeEquivalentTo(1))
}

// When many nodes look lost at once (an overloaded API server made the
// informer lag), a round reads all the agents' Leases with one LIST, and
// answers for each node as its own GET would have.
func TestLostReadsManyNodesWithOneList(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	api := newCountingAPI()
	tr, clock := newReadingTracker(api)
	const n = 20
	var nodes []string
	for i := range n {
		node := fmt.Sprintf("n%02d", i)
		nodes = append(nodes, node)
		l := agentLease(node, clock.Now(), 2)
		tr.Observe(l)
		if i == 0 {
			continue // n00's Lease was deleted: unknown, not lost
		}
		g.Expect(api.Create(ctx, l)).To(Succeed())
	}
	clock.Step(3 * time.Second)
	// Half the agents renewed meanwhile; the informer shows none of it.
	alive := map[string]bool{}
	for i := 1; i < n; i += 2 {
		l := &coordinationv1.Lease{}
		g.Expect(api.Get(ctx, client.ObjectKey{Namespace: testNS, Name: heartbeat.LeaseName(testComponent, nodes[i])}, l)).To(Succeed())
		l.Spec.RenewTime.Time = clock.Now()
		g.Expect(api.Update(ctx, l)).To(Succeed())
		alive[nodes[i]] = true
	}
	api.gets.Store(0)

	// The first caller's GET is under way; the others wait for the next
	// round, which is one LIST.
	api.hold = make(chan struct{})
	first := askLost(ctx, tr, nodes[:1])
	g.Eventually(tr.waiting).Should(Equal(1))
	rest := askLost(ctx, tr, nodes[1:])
	g.Eventually(tr.nextWaiting).Should(Equal(n - 1))
	close(api.hold)
	for _, answers := range []<-chan lostAnswer{first, rest} {
		for a := range answers {
			g.Expect(a.err).NotTo(HaveOccurred(), a.node)
			g.Expect(a.lost).To(Equal(a.node != "n00" && !alive[a.node]), a.node)
			if alive[a.node] {
				g.Expect(tr.Healthy(a.node)).To(BeTrue(), "the LIST counts as an observation")
			}
		}
	}
	g.Expect(api.gets.Load()).To(BeEquivalentTo(1))
	g.Expect(api.lists.Load()).To(BeEquivalentTo(1))
}

// A failed LIST confirms nothing for any of its nodes; a caller that stops
// waiting gets an error, not an answer.
func TestLostSharedReadFailures(t *testing.T) {
	g := NewWithT(t)
	api := newCountingAPI()
	api.failList = errors.New("the server is currently unable to handle the request")
	tr, clock := newReadingTracker(api)
	var nodes []string
	for i := range listAt {
		node := fmt.Sprintf("n%d", i)
		nodes = append(nodes, node)
		tr.Observe(agentLease(node, clock.Now(), 2))
	}
	clock.Step(time.Hour)
	api.hold = make(chan struct{})
	blocker := askLost(context.Background(), tr, []string{"other"})
	g.Eventually(tr.waiting).Should(Equal(1))
	answers := askLost(context.Background(), tr, nodes)
	g.Eventually(tr.nextWaiting).Should(Equal(listAt))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	lost, err := tr.Lost(ctx, "impatient")
	g.Expect(err).To(MatchError(context.Canceled))
	g.Expect(lost).To(BeFalse())

	close(api.hold)
	<-blocker
	for a := range answers {
		g.Expect(a.err).To(MatchError(ContainSubstring("unable to handle")), a.node)
		g.Expect(a.lost).To(BeFalse(), a.node)
	}
}
