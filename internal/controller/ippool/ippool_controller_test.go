package ippool

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/testenv"
)

// fixture names objects uniquely per test so tests share one API server.
// Each test uses its own address ranges: pools anywhere in the cluster
// overlap-check each other.
type fixture struct{ *testenv.Fixture }

func newFixture(t *testing.T) *fixture { return &fixture{testenv.NewFixture(t, k8s)} }

func (f *fixture) name(s string) string { return s + "-" + f.ID }

// pool creates an IPPool of CIDRs, deleted when the test ends.
func (f *fixture) pool(name string, cidrs ...string) string {
	f.T.Helper()
	return f.poolWithSpec(name, ipv1.IPPoolSpec{Addresses: cidrs})
}

func (f *fixture) poolWithSpec(name string, spec ipv1.IPPoolSpec) string {
	f.T.Helper()
	p := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	f.G.Expect(k8s.Create(f.Ctx, p)).To(Succeed())
	f.T.Cleanup(func() {
		// The addresses are deleted first (cleanups run last-in first-out);
		// the admission policy refuses the delete until the status says so.
		NewWithT(f.T).Eventually(func() error {
			return client.IgnoreNotFound(k8s.Delete(context.Background(), p))
		}, testenv.WaitFor).Should(Succeed())
	})
	return name
}

// reserve creates the IPAddress object that reserves addr from pool for
// the IP named ip, as the IP controller does.
func (f *fixture) reserve(addr, pool, ip string) *networkingv1.IPAddress {
	f.T.Helper()
	a := &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: addr, Labels: map[string]string{ipv1.LabelPool: pool}},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{
			Group: ipv1.GroupVersion.Group, Resource: "ips", Name: ip,
		}},
	}
	f.G.Expect(k8s.Create(f.Ctx, a)).To(Succeed())
	f.T.Cleanup(func() { _ = k8s.Delete(context.Background(), a) })
	return a
}

// poolInUse creates the pool <net>.0/29 with <net>.2 and <net>.3 reserved
// from it, and waits until its status counts them.
func (f *fixture) poolInUse(net string) (pool string, a, b *networkingv1.IPAddress) {
	f.T.Helper()
	pool = f.pool(f.name("pool"), net+".0/29")
	a, b = f.reserve(net+".2", pool, "a"), f.reserve(net+".3", pool, "b")
	f.G.Eventually(f.status(pool), testenv.WaitFor).Should(Equal(ready(6, 2, 4, "2 of 6 addresses allocated")))
	return pool, a, b
}

// getErr is the error of reading the pool.
func (f *fixture) getErr(name string) func() error {
	return func() error { return k8s.Get(f.Ctx, client.ObjectKey{Name: name}, &ipv1.IPPool{}) }
}

func (f *fixture) get(name string) *ipv1.IPPool {
	f.T.Helper()
	p := &ipv1.IPPool{}
	f.G.Expect(k8s.Get(f.Ctx, client.ObjectKey{Name: name}, p)).To(Succeed())
	return p
}

// status is the pool's status, with the Ready condition reduced to what a
// user reads in `kubectl get ippool -o wide`.
type status struct {
	Size, Available int64
	Allocated       int32
	Ready           metav1.ConditionStatus
	Reason, Message string
	// Observed is true when status.observedGeneration and the condition's
	// observedGeneration match metadata.generation.
	Observed bool
}

func (f *fixture) status(name string) func() status {
	return func() status {
		p := f.get(name)
		s := status{Size: p.Status.Size, Available: p.Status.Available, Allocated: p.Status.Allocated}
		if c := meta.FindStatusCondition(p.Status.Conditions, ipv1.ConditionReady); c != nil {
			s.Ready, s.Reason, s.Message = c.Status, c.Reason, c.Message
			s.Observed = p.Status.ObservedGeneration == p.Generation && c.ObservedGeneration == p.Generation
		}
		return s
	}
}

func ready(size, allocated, available int64, message string) status {
	return status{Size: size, Allocated: int32(allocated), Available: available,
		Ready: metav1.ConditionTrue, Reason: ipv1.ReasonReady, Message: message, Observed: true}
}

// A pool's status counts the addresses reserved from it, as IPAddress
// objects labelled with its name, against what it can hand out.
func TestStatusCountsAllocatedAddresses(t *testing.T) {
	f := newFixture(t)
	// 10.10.1.1-6 (no network or broadcast address) and 2001:db8:1::1-7
	// (no subnet-router anycast address).
	pool := f.pool(f.name("pool"), "10.10.1.0/29", "2001:db8:1::/125")
	f.G.Eventually(f.status(pool), testenv.WaitFor).Should(Equal(ready(13, 0, 13, "0 of 13 addresses allocated")))
	f.G.Expect(f.get(pool).Finalizers).To(ContainElement(Finalizer))

	v4 := f.reserve("10.10.1.2", pool, "a")
	f.reserve("2001:db8:1::2", pool, "b")
	other := f.pool(f.name("other"), "10.10.11.0/29")
	f.reserve("10.10.11.2", other, "c") // another pool's: not counted
	f.G.Eventually(f.status(pool), testenv.WaitFor).Should(Equal(ready(13, 2, 11, "2 of 13 addresses allocated")))

	f.G.Expect(k8s.Delete(f.Ctx, v4)).To(Succeed())
	f.G.Eventually(f.status(pool), testenv.WaitFor).Should(Equal(ready(13, 1, 12, "1 of 13 addresses allocated")))

	// A spec change is observed.
	p := f.get(pool)
	orig := p.DeepCopy()
	p.Spec.Addresses = append(p.Spec.Addresses, "10.10.1.8/30")
	f.G.Expect(k8s.Patch(f.Ctx, p, client.MergeFrom(orig))).To(Succeed())
	f.G.Eventually(f.status(pool), testenv.WaitFor).Should(Equal(ready(15, 1, 14, "1 of 15 addresses allocated")))
	f.G.Expect(f.status(other)()).To(Equal(ready(6, 1, 5, "1 of 6 addresses allocated")))
}

// status.available is what automatic allocation can still hand out: an IP
// holding a reserved address (named explicitly in its spec.address) does
// not use up any of it.
func TestAvailableIgnoresReservedAddressesInUse(t *testing.T) {
	f := newFixture(t)
	// 10.10.2.2-6 hand out automatically; 10.10.2.1 only on request.
	pool := f.poolWithSpec(f.name("pool"), ipv1.IPPoolSpec{Addresses: []string{"10.10.2.0/29"}, Reserved: []string{"10.10.2.1"}})
	f.G.Eventually(f.status(pool), testenv.WaitFor).Should(Equal(ready(5, 0, 5, "0 of 5 addresses allocated")))
	f.reserve("10.10.2.1", pool, "gateway")
	f.reserve("10.10.2.2", pool, "a")
	f.G.Eventually(f.status(pool), testenv.WaitFor).Should(Equal(ready(5, 2, 4, "2 of 5 addresses allocated")))
}

// Of two overlapping pools the younger is not Ready and names the older;
// the older is unaffected. When the older goes, the younger is Ready.
func TestYoungerOverlappingPoolIsNotReady(t *testing.T) {
	f := newFixture(t)
	// Names sort the other way round: age decides, not the name.
	older := f.pool(f.name("z-older"), "10.10.3.0/28")
	f.G.Eventually(f.status(older), testenv.WaitFor).Should(Equal(ready(14, 0, 14, "0 of 14 addresses allocated")))
	// Creation timestamps have a resolution of one second.
	time.Sleep(time.Until(f.get(older).CreationTimestamp.Add(time.Second + 100*time.Millisecond)))
	younger := f.pool(f.name("a-younger"), "10.10.3.8/29")

	f.G.Eventually(f.status(younger), testenv.WaitFor).Should(And(
		HaveField("Ready", metav1.ConditionFalse),
		HaveField("Reason", ipv1.ReasonPoolOverlap),
		HaveField("Message", "addresses overlap IPPool "+older+", which is older; an address belongs to whichever IP reserves it first"),
		HaveField("Observed", true),
	))
	f.G.Consistently(f.status(older), 2*time.Second, 100*time.Millisecond).Should(Equal(ready(14, 0, 14, "0 of 14 addresses allocated")))

	f.G.Expect(k8s.Delete(f.Ctx, f.get(older))).To(Succeed())
	f.G.Eventually(f.status(younger), testenv.WaitFor).Should(Equal(ready(6, 0, 6, "0 of 6 addresses allocated")))
}

// liftDeletePolicy removes the admission policy's binding until the test
// ends, to reach the finalizer: the backstop for a delete that comes
// between an allocation and the status that counts it.
func liftDeletePolicy(t *testing.T, g *WithT, pool string) {
	g.Expect(k8s.Delete(context.Background(), binding.DeepCopy())).To(Succeed())
	t.Cleanup(func() {
		NewWithT(t).Expect(k8s.Create(context.Background(), binding.DeepCopy())).To(Succeed())
	})
	g.Eventually(func() error {
		return k8s.Delete(context.Background(), &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}}, client.DryRunAll)
	}, testenv.WaitFor).Should(Succeed())
}

// A pool deleted while addresses are reserved from it stays, with a
// Warning Event saying why, until they are released.
func TestDeletionWaitsForAllocatedAddresses(t *testing.T) {
	f := newFixture(t)
	pool, a, b := f.poolInUse("10.10.4")

	liftDeletePolicy(t, f.G, pool)
	f.G.Expect(k8s.Delete(f.Ctx, f.get(pool))).To(Succeed())
	// A cluster-scoped object's Events are in the default namespace.
	e := f.Event("IPPool", client.ObjectKey{Namespace: "default", Name: pool}, ipv1.ReasonDeleteBlocked)
	f.G.Expect(e.Type).To(Equal(corev1.EventTypeWarning))
	f.G.Expect(e.Note).To(Equal("2 addresses are still allocated from this pool; delete their IPs first"))
	f.G.Consistently(func() []string { return f.get(pool).Finalizers }, time.Second, 100*time.Millisecond).Should(
		ContainElement(Finalizer))

	f.G.Expect(k8s.Delete(f.Ctx, a)).To(Succeed())
	f.G.Consistently(func() []string { return f.get(pool).Finalizers }, time.Second, 100*time.Millisecond).Should(
		ContainElement(Finalizer), "one address is still reserved")
	f.G.Expect(k8s.Delete(f.Ctx, b)).To(Succeed())
	f.G.Eventually(f.getErr(pool), testenv.WaitFor).Should(Satisfy(apierrors.IsNotFound))
}

// The API server refuses to delete a pool whose status counts allocated
// addresses, and says what to do.
func TestPolicyRefusesDeletingAPoolInUse(t *testing.T) {
	f := newFixture(t)
	pool, a, b := f.poolInUse("10.10.5")

	message := "IPPool " + pool + " still has 2 allocated addresses; delete the IPs that use it first (kubectl kubext ip list)"
	// A new policy takes a moment to take effect; a dry run leaves the pool
	// alone until it does.
	f.G.Eventually(func() error { return k8s.Delete(f.Ctx, f.get(pool), client.DryRunAll) }, testenv.WaitFor).Should(
		MatchError(ContainSubstring(message)))
	err := k8s.Delete(f.Ctx, f.get(pool))
	f.G.Expect(err).To(MatchError(ContainSubstring(message)))
	f.G.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	f.G.Expect(f.get(pool).DeletionTimestamp).To(BeNil())

	f.G.Expect(k8s.Delete(f.Ctx, a)).To(Succeed())
	f.G.Expect(k8s.Delete(f.Ctx, b)).To(Succeed())
	f.G.Eventually(f.status(pool), testenv.WaitFor).Should(Equal(ready(6, 0, 6, "0 of 6 addresses allocated")))
	f.G.Expect(k8s.Delete(f.Ctx, f.get(pool))).To(Succeed())
	f.G.Eventually(f.getErr(pool), testenv.WaitFor).Should(Satisfy(apierrors.IsNotFound))
}

// A reconcile that finds nothing to change writes nothing: no churn for
// watchers of the pool.
func TestIdleReconcileWritesNothing(t *testing.T) {
	f := newFixture(t)
	pool := f.pool(f.name("pool"), "10.10.6.0/29")
	f.reserve("10.10.6.2", pool, "a")
	f.G.Eventually(f.status(pool), testenv.WaitFor).Should(Equal(ready(6, 1, 5, "1 of 6 addresses allocated")))
	// Times in the API have a resolution of one second: a write stamped
	// with the time would now differ from the last one.
	time.Sleep(1100 * time.Millisecond)
	version := f.get(pool).ResourceVersion

	// Every pool is reconciled when another pool comes or changes (overlaps).
	before := reconciles(f.G)
	other := f.pool(f.name("other"), "10.10.16.0/29")
	f.reserve("10.10.16.2", other, "b")
	f.G.Eventually(f.status(other), testenv.WaitFor).Should(Equal(ready(6, 1, 5, "1 of 6 addresses allocated")))
	// The reconciles the last status write brings may still be running.
	f.G.Eventually(func() float64 { return reconciles(f.G) }, testenv.WaitFor).Should(BeNumerically(">=", before+3),
		"the other pool's creation, finalizer and status each reconcile every pool")

	f.G.Consistently(func() string { return f.get(pool).ResourceVersion }, 2*time.Second, 100*time.Millisecond).Should(Equal(version))
}

// reconciles is how many reconciles the ippool controller has finished.
func reconciles(g *WithT) float64 {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	var total float64
	for _, mf := range families {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "ippool" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// A hundred and fifty addresses reserved over a few seconds (claimants
// scheduled together) are counted in a few writes of the pool's status,
// not one each: every ip-agent of the cluster watches the pools, and a
// thousand agents decode every write. The pool's own status writes land
// while reservations still come; they must not start a count of their own.
// The counts follow within DefaultCountPeriod.
func TestBurstOfReservationsSharesStatusWrites(t *testing.T) {
	f := newFixture(t)
	pool := f.pool(f.name("burst"), "198.51.100.0/24")
	f.G.Eventually(f.status(pool), testenv.WaitFor).Should(Equal(ready(254, 0, 254, "0 of 254 addresses allocated")))
	w, err := watcher.Watch(f.Ctx, &ipv1.IPPoolList{}, client.MatchingFields{"metadata.name": pool},
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: f.get(pool).ResourceVersion}})
	f.G.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()

	const burst = 150
	start := time.Now()
	for i := range burst {
		f.reserve(fmt.Sprintf("198.51.100.%d", 1+i), pool, fmt.Sprintf("ip-%d", i))
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	writes := 0
	deadline := time.After(testenv.WaitFor)
	for counted := int32(0); counted < burst; {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch of the pool ended")
			}
			if e.Type == watch.Modified {
				writes++
				counted = e.Object.(*ipv1.IPPool).Status.Allocated
			}
		case <-deadline:
			t.Fatalf("the pool's status did not count the %d reservations within %s", burst, testenv.WaitFor)
		}
	}
	// One write per period while reservations keep coming, and the last.
	if most := int(took/DefaultCountPeriod) + 2; writes > most {
		t.Fatalf("%d reservations made in %s were counted in %d writes of the pool's status; want at most %d (one per %s)",
			burst, took.Round(time.Millisecond), writes, most, DefaultCountPeriod)
	}
	t.Logf("%d reservations made in %s counted in %d status writes", burst, took.Round(time.Millisecond), writes)
}

// The pool's own status writes do not reconcile it again (that would write
// the counts again at once, whatever CountPeriod says); every other change
// of the pool does.
func TestOwnStatusWriteIsNoEvent(t *testing.T) {
	old := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 1, ResourceVersion: "1",
		Finalizers: []string{Finalizer}, Labels: map[string]string{"a": "b"}}}
	for _, tc := range []struct {
		name   string
		change func(*ipv1.IPPool)
		want   bool
	}{
		{"status only", func(p *ipv1.IPPool) { p.Status.Allocated = 7; p.ResourceVersion = "2" }, false},
		{"spec", func(p *ipv1.IPPool) { p.Generation = 2 }, true},
		{"deletion", func(p *ipv1.IPPool) { p.DeletionTimestamp = &metav1.Time{Time: time.Now()} }, true},
		{"finalizers", func(p *ipv1.IPPool) { p.Finalizers = nil }, true},
		{"labels", func(p *ipv1.IPPool) { p.Labels = nil }, true},
		{"annotations", func(p *ipv1.IPPool) { p.Annotations = map[string]string{"x": "y"} }, true},
	} {
		n := old.DeepCopy()
		tc.change(n)
		if got := notStatusOnly.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: n}); got != tc.want {
			t.Errorf("%s: reconcile = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// queueRecorder is a work queue that records what is added and after how
// long.
type queueRecorder struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	added map[string]time.Duration
}

func (q *queueRecorder) Add(r reconcile.Request) { q.AddAfter(r, 0) }
func (q *queueRecorder) AddAfter(r reconcile.Request, d time.Duration) {
	q.added[r.Name] = d
}

// Reservations and attachments are counted after DefaultCountPeriod;
// a release at once, so that a pool whose last IP is gone can be deleted
// at once (the ippool-in-use policy reads the count).
func TestReleasesAreCountedAtOnce(t *testing.T) {
	h := after(DefaultCountPeriod, addressToPool)
	a := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "198.51.100.7", Labels: map[string]string{ipv1.LabelPool: "p"}}}
	for _, tc := range []struct {
		name string
		send func(q workqueue.TypedRateLimitingInterface[reconcile.Request])
		want time.Duration
	}{
		{"reservation", func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(t.Context(), event.CreateEvent{Object: a}, q)
		}, DefaultCountPeriod},
		{"change", func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(t.Context(), event.UpdateEvent{ObjectOld: a, ObjectNew: a}, q)
		}, DefaultCountPeriod},
		{"release", func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Delete(t.Context(), event.DeleteEvent{Object: a}, q)
		}, 0},
	} {
		q := &queueRecorder{added: map[string]time.Duration{}}
		tc.send(q)
		if got, ok := q.added["p"]; !ok || got != tc.want {
			t.Errorf("%s: pool p enqueued %v after %s, want after %s", tc.name, ok, got, tc.want)
		}
	}
}
