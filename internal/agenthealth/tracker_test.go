package agenthealth

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/kubext/kubext/internal/heartbeat"
)

// agentLease is a heartbeat Lease as an agent writes it, renewed at renew
// on the agent's clock.
func agentLease(node string, renew time.Time, seconds int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: heartbeat.LeaseName(testComponent, node),
			Labels: map[string]string{heartbeat.LabelComponent: testComponent}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(node),
			LeaseDurationSeconds: ptr.To(seconds),
			RenewTime:            &metav1.MicroTime{Time: renew},
		},
	}
}

func newTestTracker() (*Tracker, *clocktesting.FakeClock) {
	return newReadingTracker(fake.NewClientBuilder().Build())
}

// newReadingTracker is a Tracker whose confirmation reads go to reader.
func newReadingTracker(reader client.Reader) (*Tracker, *clocktesting.FakeClock) {
	clock := clocktesting.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	tr := NewTracker(testComponent, testNS, reader)
	tr.now = clock.Now
	return tr, clock
}

// changes drains the nodes reported on Changes so far.
func changes(tr *Tracker) []string {
	var nodes []string
	for {
		select {
		case ev := <-tr.Changes():
			nodes = append(nodes, NodeOf(ev.Object))
		default:
			return nodes
		}
	}
}

// A node is healthy while the Tracker sees its renewTime change within the
// lease duration, measured on the Tracker's own clock: the agent's clock
// may be hours off.
func TestTrackerHealthFollowsRenewalsOnItsOwnClock(t *testing.T) {
	g := NewWithT(t)
	tr, clock := newTestTracker()
	agentClock := clock.Now().Add(-3 * time.Hour)

	g.Expect(tr.Healthy("n1")).To(BeFalse(), "a node never seen is not healthy")
	g.Expect(tr.LastRenewal("n1")).To(BeZero())

	t0 := clock.Now()
	tr.Observe(agentLease("n1", agentClock, 2))
	g.Expect(tr.Healthy("n1")).To(BeTrue())
	g.Expect(tr.LastRenewal("n1")).To(Equal(t0), "LastRenewal is on the Tracker's clock, not the agent's")
	g.Expect(changes(tr)).To(Equal([]string{"n1"}), "turning healthy is a change")

	// Renewed within the duration: healthy, measured from the new sighting.
	clock.Step(1500 * time.Millisecond)
	t1 := clock.Now()
	tr.Observe(agentLease("n1", agentClock.Add(time.Second), 2))
	g.Expect(tr.LastRenewal("n1")).To(Equal(t1))
	clock.Step(2*time.Second - time.Nanosecond)
	g.Expect(tr.Healthy("n1")).To(BeTrue())
	g.Expect(changes(tr)).To(BeEmpty(), "staying healthy is no change")

	// The same Lease seen again (a resync, a relist, a label edit) is no
	// renewal.
	tr.Observe(agentLease("n1", agentClock.Add(time.Second), 2))
	g.Expect(tr.LastRenewal("n1")).To(Equal(t1))
	clock.Step(time.Nanosecond)
	g.Expect(tr.Healthy("n1")).To(BeFalse(), "a full lease duration without a renewal")
	tr.Observe(agentLease("n1", agentClock.Add(time.Second), 2))
	g.Expect(tr.Healthy("n1")).To(BeFalse(), "re-observing an unchanged Lease does not revive the node")

	// A renewal, even with an older renewTime (the agent's clock stepped
	// back), revives it.
	tr.Observe(agentLease("n1", agentClock.Add(-time.Minute), 2))
	g.Expect(tr.Healthy("n1")).To(BeTrue())
	g.Expect(tr.LastRenewal("n1")).To(Equal(clock.Now()))
}

func TestTrackerUsesTheLeaseDuration(t *testing.T) {
	g := NewWithT(t)
	tr, clock := newTestTracker()
	tr.Observe(agentLease("long", clock.Now(), 10))
	tr.Observe(agentLease("unset", clock.Now(), 0)) // counts as 1s
	clock.Step(time.Second)
	g.Expect(tr.Healthy("unset")).To(BeFalse())
	g.Expect(tr.Healthy("long")).To(BeTrue())
	clock.Step(9 * time.Second)
	g.Expect(tr.Healthy("long")).To(BeFalse())
}

func TestTrackerIgnoresOtherLeases(t *testing.T) {
	g := NewWithT(t)
	tr, clock := newTestTracker()

	other := agentLease("n1", clock.Now(), 2)
	other.Labels[heartbeat.LabelComponent] = "another-agent"
	tr.Observe(other)
	noHolder := agentLease("n2", clock.Now(), 2)
	noHolder.Spec.HolderIdentity = nil
	tr.Observe(noHolder)
	noRenewal := agentLease("n3", clock.Now(), 2)
	noRenewal.Spec.RenewTime = nil
	tr.Observe(noRenewal)

	for _, n := range []string{"n1", "n2", "n3"} {
		g.Expect(tr.Healthy(n)).To(BeFalse(), n)
	}
	g.Expect(changes(tr)).To(BeEmpty())
}

// The Tracker's Start reports, on Changes, each node that stops renewing:
// once, when a full lease duration has passed.
func TestTrackerReportsLostNodes(t *testing.T) {
	g := NewWithT(t)
	tr, clock := newTestTracker()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tr.Start(ctx)
	}()
	defer func() { cancel(); <-done }()

	tr.Observe(agentLease("n1", clock.Now(), 2))
	tr.Observe(agentLease("n2", clock.Now(), 5))
	g.Expect(changes(tr)).To(ConsistOf("n1", "n2"))

	clock.Step(2*time.Second - time.Nanosecond)
	g.Consistently(func() []string { return changes(tr) }, 300*time.Millisecond, 20*time.Millisecond).Should(BeEmpty())

	clock.Step(time.Nanosecond)
	var ev event.GenericEvent
	g.Eventually(tr.Changes(), time.Second).Should(Receive(&ev))
	g.Expect(NodeOf(ev.Object)).To(Equal("n1"))
	g.Expect(ev.Object.GetName()).To(Equal(heartbeat.LeaseName(testComponent, "n1")))
	g.Consistently(func() []string { return changes(tr) }, 300*time.Millisecond, 20*time.Millisecond).Should(BeEmpty(),
		"a lost node is reported once")

	// Back: a change again; lost again: a change again.
	tr.Observe(agentLease("n1", clock.Now(), 2))
	g.Expect(changes(tr)).To(Equal([]string{"n1"}))
	clock.Step(2 * time.Second)
	g.Eventually(func() []string { return changes(tr) }, time.Second, 20*time.Millisecond).Should(Equal([]string{"n1"}))
	g.Expect(tr.Healthy("n2")).To(BeTrue(), "n2 is still within its 5s")
	clock.Step(3 * time.Second)
	g.Eventually(func() []string { return changes(tr) }, time.Second, 20*time.Millisecond).Should(Equal([]string{"n2"}))
}

// A deleted Lease says nothing about its agent (anyone allowed to delete
// Leases can do it; a live agent recreates it): the node keeps its last
// observation, and a change is reported so that the controller looks.
func TestTrackerForgetKeepsTheObservation(t *testing.T) {
	g := NewWithT(t)
	tr, clock := newTestTracker()
	l := agentLease("n1", clock.Now(), 10)
	tr.Observe(l)
	g.Expect(changes(tr)).To(HaveLen(1))

	tr.Forget(l)
	g.Expect(tr.Healthy("n1")).To(BeTrue(), "a deleted Lease is unknown, not dead")
	g.Expect(tr.LastRenewal("n1")).To(Equal(clock.Now()))
	g.Expect(changes(tr)).To(Equal([]string{"n1"}))
}

// Lost never trusts the informer alone. Each case is a stale view that used
// to make a live node count as lost.
func TestTrackerLostConfirmsFromTheAPIServer(t *testing.T) {
	ctx := context.Background()

	t.Run("a renewal the informer has not shown yet revives the node", func(t *testing.T) {
		g := NewWithT(t)
		api := fake.NewClientBuilder().Build()
		tr, clock := newReadingTracker(api)
		tr.Observe(agentLease("n1", clock.Now(), 2))
		// The controller is paused (or its watch is slow) for 3 s; the
		// agent kept renewing, the informer shows none of it.
		clock.Step(3 * time.Second)
		g.Expect(tr.Healthy("n1")).To(BeFalse(), "the informer's view is stale")
		g.Expect(api.Create(ctx, agentLease("n1", clock.Now(), 2))).To(Succeed())
		g.Expect(tr.Lost(ctx, "n1")).To(BeFalse())
		g.Expect(tr.Healthy("n1")).To(BeTrue(), "the read counts as an observation")
	})

	t.Run("no renewal for a lease duration since it was first seen is lost", func(t *testing.T) {
		g := NewWithT(t)
		api := fake.NewClientBuilder().Build()
		tr, clock := newReadingTracker(api)
		l := agentLease("n1", clock.Now(), 2)
		g.Expect(api.Create(ctx, l.DeepCopy())).To(Succeed())
		tr.Observe(l)
		g.Expect(tr.Lost(ctx, "n1")).To(BeFalse(), "healthy")
		clock.Step(2*time.Second - time.Nanosecond)
		g.Expect(tr.Lost(ctx, "n1")).To(BeFalse(), "not a full lease duration yet")
		clock.Step(time.Nanosecond)
		g.Expect(tr.Lost(ctx, "n1")).To(BeTrue())
	})

	t.Run("a deleted Lease is unknown until reads find it missing for a lease duration", func(t *testing.T) {
		g := NewWithT(t)
		api := fake.NewClientBuilder().Build()
		tr, clock := newReadingTracker(api)
		tr.Observe(agentLease("n1", clock.Now(), 2))
		clock.Step(5 * time.Second) // informer silent for long: stale or dead
		g.Expect(tr.Lost(ctx, "n1")).To(BeFalse(), "first read finds it missing: unknown")
		clock.Step(time.Second)
		g.Expect(tr.Lost(ctx, "n1")).To(BeFalse(), "missing for less than a lease duration")
		// The agent recreates it: alive.
		g.Expect(api.Create(ctx, agentLease("n1", clock.Now(), 2))).To(Succeed())
		g.Expect(tr.Lost(ctx, "n1")).To(BeFalse())
		g.Expect(tr.Healthy("n1")).To(BeTrue())
		// Deleted again, and the agent really is gone this time.
		g.Expect(api.Delete(ctx, agentLease("n1", clock.Now(), 2))).To(Succeed())
		clock.Step(2 * time.Second)
		g.Expect(tr.Lost(ctx, "n1")).To(BeFalse(), "first missing read restarts the count")
		clock.Step(2 * time.Second)
		g.Expect(tr.Lost(ctx, "n1")).To(BeTrue())
	})

	t.Run("an unreachable API server confirms nothing", func(t *testing.T) {
		g := NewWithT(t)
		api := interceptor.NewClient(fake.NewClientBuilder().Build(), interceptor.Funcs{
			Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
				return errors.New("connection refused")
			}})
		tr, clock := newReadingTracker(api)
		tr.Observe(agentLease("n1", clock.Now(), 2))
		clock.Step(time.Hour)
		lost, err := tr.Lost(ctx, "n1")
		g.Expect(err).To(MatchError(ContainSubstring("connection refused")))
		g.Expect(lost).To(BeFalse())
	})
}

// notify never blocks: when nobody drains Changes (a replica that is not
// the leader), the Lease informer must keep running.
func TestTrackerNeverBlocksOnAFullChannel(t *testing.T) {
	g := NewWithT(t)
	tr, clock := newTestTracker()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2 * cap(tr.changes) {
			tr.Observe(agentLease(fmt.Sprintf("n%d", i), clock.Now(), 2))
		}
		tr.Forget(agentLease("n0", clock.Now(), 2))
	}()
	g.Eventually(done, 5*time.Second).Should(BeClosed())
	g.Expect(tr.Changes()).To(HaveLen(cap(tr.changes)))
	// Observations were recorded even when the change was dropped.
	g.Expect(tr.Healthy(fmt.Sprintf("n%d", 2*cap(tr.changes)-1))).To(BeTrue())
}

// Watch feeds the Tracker from the Lease informer, and Synced follows the
// informer's sync.
func TestTrackerWatch(t *testing.T) {
	g := NewWithT(t)
	tr, clock := newTestTracker()
	g.Expect(tr.Synced()).To(BeFalse(), "not synced before Watch")

	inf := controllertest.NewFakeInformer()
	informers := &informertest.FakeInformers{InformersByGVK: map[schema.GroupVersionKind]toolscache.SharedIndexInformer{
		coordinationv1.SchemeGroupVersion.WithKind("Lease"): inf,
	}}
	g.Expect(tr.Watch(context.Background(), informers)).To(Succeed())
	g.Expect(tr.Synced()).To(BeFalse(), "not synced before the informer")
	inf.Synced()
	g.Expect(tr.Synced()).To(BeTrue())

	l := agentLease("n1", clock.Now(), 2)
	inf.Add(l)
	g.Expect(tr.Healthy("n1")).To(BeTrue())
	clock.Step(1500 * time.Millisecond)
	renewed := agentLease("n1", clock.Now(), 2)
	inf.Update(l, renewed)
	g.Expect(tr.LastRenewal("n1")).To(Equal(clock.Now()))
	inf.Delete(renewed)
	g.Expect(tr.Healthy("n1")).To(BeTrue(), "a deleted Lease is unknown, not dead")
	g.Expect(changes(tr)).To(Equal([]string{"n1", "n1"}), "turned healthy, then deleted")
}
