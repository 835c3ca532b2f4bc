package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	clienttesting "k8s.io/client-go/testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

const (
	testNS        = "kubext-system"
	testComponent = "ip-agent"
	testNode      = "node-1"
)

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *fakeClock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }

// callbacks counts the calls of OnLost, OnRegained and OnRenewed.
type callbacks struct{ lost, regained, renewed atomic.Int32 }

func (c *callbacks) config(cfg Config) Config {
	cfg.OnLost = func() { c.lost.Add(1) }
	cfg.OnRegained = func() { c.regained.Add(1) }
	cfg.OnRenewed = func() { c.renewed.Add(1) }
	return cfg
}

// run starts h until the test ends; the returned function stops it and
// waits until Start has returned.
func run(t *testing.T, h *Heartbeat) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.Start(ctx)
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

func testConfig(client coordinationclient.LeasesGetter) Config {
	return Config{Client: typedLeases{client}, Namespace: testNS, Component: testComponent, Node: testNode}
}

// typedLeases is a typed Lease client (a fake clientset's) as a
// LeasesGetter (heartbeattest.Typed, which this package cannot import).
type typedLeases struct {
	c coordinationclient.LeasesGetter
}

func (t typedLeases) Leases(namespace string) LeaseInterface { return t.c.Leases(namespace) }

func TestNewRefusesBadConfigs(t *testing.T) {
	client := fake.NewClientset().CoordinationV1()
	valid := func(mutate func(*Config)) Config {
		cfg := testConfig(client)
		cfg.Duration = 3 * time.Second
		mutate(&cfg)
		return cfg
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"no client", valid(func(c *Config) { c.Client = nil }), "client, namespace, component and node are required"},
		{"idle lease shorter than the lease", valid(func(c *Config) {
			c.Idle, c.IdleDuration, c.IdleRenewInterval = func() bool { return true }, 2*time.Second, time.Second
		}), "need renew interval (1s) <= idle renew interval (1s) < idle lease duration (2s, whole seconds, at least the lease duration 3s)"},
		{"idle renewal not within the idle lease", valid(func(c *Config) {
			c.Idle, c.IdleDuration, c.IdleRenewInterval = func() bool { return true }, 10*time.Second, 10*time.Second
		}), "need renew interval (1s) <= idle renew interval (10s) < idle lease duration (10s, whole seconds, at least the lease duration 3s)"},
		{"fractional idle lease", valid(func(c *Config) {
			c.Idle, c.IdleDuration, c.IdleRenewInterval = func() bool { return true }, 10500*time.Millisecond, 5*time.Second
		}), "need renew interval (1s) <= idle renew interval (5s) < idle lease duration (10.5s, whole seconds, at least the lease duration 3s)"},
		{"no namespace", valid(func(c *Config) { c.Namespace = "" }), "client, namespace, component and node are required"},
		{"no component", valid(func(c *Config) { c.Component = "" }), "client, namespace, component and node are required"},
		{"no node", valid(func(c *Config) { c.Node = "" }), "client, namespace, component and node are required"},
		{"no duration", valid(func(c *Config) { c.Duration = 0 }), "lease duration 0s is shorter than 1s"},
		{"duration under 1s", valid(func(c *Config) { c.Duration = 900 * time.Millisecond }), "lease duration 900ms is shorter than 1s"},
		{"fractional duration", valid(func(c *Config) { c.Duration = 2500 * time.Millisecond }), "lease duration 2.5s is not a whole number of seconds"},
		{"fence after = duration", valid(func(c *Config) { c.FenceAfter = 3 * time.Second }),
			"need renew interval (1s) < fence after (3s) < lease duration (3s)"},
		{"fence after > duration", valid(func(c *Config) { c.FenceAfter = 4 * time.Second }),
			"need renew interval (1s) < fence after (4s) < lease duration (3s)"},
		{"renew = fence after", valid(func(c *Config) { c.RenewInterval, c.FenceAfter = 2*time.Second, 2*time.Second }),
			"need renew interval (2s) < fence after (2s) < lease duration (3s)"},
		{"renew > fence after", valid(func(c *Config) { c.RenewInterval, c.FenceAfter = 2500*time.Millisecond, 2*time.Second }),
			"need renew interval (2.5s) < fence after (2s) < lease duration (3s)"},
		// With the default renew interval of 1s, the default fence-after of
		// a 2s lease (1s) leaves no room for a renewal.
		{"defaults too long for a 2s lease", valid(func(c *Config) { c.Duration = 2 * time.Second }),
			"need renew interval (1s) < fence after (1s) < lease duration (2s)"},
		// The default fence-after is never under half the lease, so a renew
		// interval of half the lease or more cannot work.
		{"renewal too long for the default fence-after", valid(func(c *Config) { c.Duration, c.RenewInterval = 4*time.Second, 2*time.Second }),
			"need renew interval (2s) < fence after (2s) < lease duration (4s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			h, err := New(tc.cfg)
			g.Expect(err).To(MatchError("heartbeat: " + tc.err))
			g.Expect(h).To(BeNil())
		})
	}
}

func TestNewFillsDefaults(t *testing.T) {
	client := fake.NewClientset().CoordinationV1()
	for _, tc := range []struct {
		name                      string
		duration, renew, fence    time.Duration
		wantRenew, wantFenceAfter time.Duration
	}{
		// Fence one renewal before the controller would give up.
		{"defaults", 10 * time.Second, 0, 0, time.Second, 9 * time.Second},
		{"shortest lease with default renewals", 3 * time.Second, 0, 0, time.Second, 2 * time.Second},
		{"the agent's flags", 2 * time.Second, 500 * time.Millisecond, 0, 500 * time.Millisecond, 1500 * time.Millisecond},
		{"explicit", 3 * time.Second, 200 * time.Millisecond, time.Second, 200 * time.Millisecond, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cfg := testConfig(client)
			cfg.Duration, cfg.RenewInterval, cfg.FenceAfter = tc.duration, tc.renew, tc.fence
			h, err := New(cfg)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(h.cfg.RenewInterval).To(Equal(tc.wantRenew))
			g.Expect(h.cfg.FenceAfter).To(Equal(tc.wantFenceAfter))
			g.Expect(h.cfg.now).NotTo(BeNil())
			// Callbacks left out may be called.
			g.Expect(func() { h.cfg.OnLost(); h.cfg.OnRegained(); h.cfg.OnRenewed() }).NotTo(Panic())
			g.Expect(h.Held()).To(BeFalse(), "nothing is held before the first renewal")
			g.Expect(h.NeedLeaderElection()).To(BeFalse())
		})
	}
}

// Start creates the Lease the controller watches, and keeps renewing it.
func TestStartCreatesAndRenewsTheLease(t *testing.T) {
	g := NewWithT(t)
	clientset := fake.NewClientset()
	var cb callbacks
	cfg := cb.config(testConfig(clientset.CoordinationV1()))
	cfg.Duration, cfg.RenewInterval = 3*time.Second, 50*time.Millisecond
	h, err := New(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	before := time.Now()
	run(t, h)

	get := func() (*coordinationv1.Lease, error) {
		return clientset.CoordinationV1().Leases(testNS).Get(context.Background(), "ip-agent-node-1", metav1.GetOptions{})
	}
	g.Eventually(get, time.Second, 10*time.Millisecond).Should(And(
		HaveField("Labels", Equal(map[string]string{LabelComponent: testComponent})),
		HaveField("Spec.HolderIdentity", HaveValue(Equal(testNode))),
		HaveField("Spec.LeaseDurationSeconds", HaveValue(BeEquivalentTo(3))),
		HaveField("Spec.RenewTime", Not(BeNil())),
		HaveField("Spec.AcquireTime", Not(BeNil())),
	))
	g.Eventually(h.Held, time.Second, 5*time.Millisecond).Should(BeTrue())
	first, _ := get()
	g.Expect(first.Spec.RenewTime.Time).To(BeTemporally(">=", before))
	g.Eventually(cb.regained.Load, time.Second, 5*time.Millisecond).Should(BeEquivalentTo(1), "taking the lease the first time counts as regaining it")

	g.Eventually(func() time.Time {
		l, err := get()
		g.Expect(err).NotTo(HaveOccurred())
		return l.Spec.RenewTime.Time
	}, time.Second, 10*time.Millisecond).Should(BeTemporally(">", first.Spec.RenewTime.Time))
	l, _ := get()
	g.Expect(l.Spec.AcquireTime.Time).To(Equal(first.Spec.AcquireTime.Time), "a renewal does not re-acquire")
	g.Eventually(cb.renewed.Load, time.Second, 5*time.Millisecond).Should(BeNumerically(">=", 2))
	g.Expect(cb.regained.Load()).To(BeEquivalentTo(1))
	g.Expect(cb.lost.Load()).To(BeZero())
}

// flakyAPI makes the fake API server fail Lease requests on demand, and
// counts the renewals that got through.
type flakyAPI struct {
	failing   atomic.Bool
	failures  atomic.Int32
	successes atomic.Int32
	// onSuccess runs when a create or update of the Lease is let through.
	onSuccess func()
}

func (f *flakyAPI) install(c *fake.Clientset) {
	c.PrependReactor("*", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if f.failing.Load() {
			f.failures.Add(1)
			return true, nil, errors.New("connection refused")
		}
		if verb := a.GetVerb(); verb == "create" || verb == "update" {
			f.successes.Add(1)
			if f.onSuccess != nil {
				f.onSuccess()
			}
		}
		return false, nil, nil
	})
}

// When the API server stops taking renewals, the agent fences once,
// FenceAfter after the *start* of its last successful renewal (not its
// end: the controller may have observed it as early as that); when
// renewals succeed again it regains the hold once.
func TestFencesOnceWhenRenewalsFailAndRegains(t *testing.T) {
	g := NewWithT(t)
	clock := newFakeClock()
	clientset := fake.NewClientset()
	api := &flakyAPI{}
	// Each successful write takes 300ms on the agent's clock: the renewal
	// starts at t and ends at t+300ms.
	var lastStart atomic.Pointer[time.Time]
	api.onSuccess = func() {
		now := clock.Now()
		lastStart.Store(&now)
		clock.Add(300 * time.Millisecond)
	}
	api.install(clientset)
	var cb callbacks
	cfg := cb.config(testConfig(clientset.CoordinationV1()))
	cfg.Duration, cfg.RenewInterval, cfg.FenceAfter = 2*time.Second, 40*time.Millisecond, time.Second
	cfg.now = clock.Now
	h, err := New(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	stop := run(t, h)

	g.Eventually(h.Held, time.Second, 5*time.Millisecond).Should(BeTrue())
	g.Eventually(cb.renewed.Load, time.Second, 5*time.Millisecond).Should(BeNumerically(">=", 3))

	api.failing.Store(true)
	// Once a renewal has failed, none that started earlier is in flight.
	g.Eventually(api.failures.Load, time.Second, 5*time.Millisecond).Should(BeNumerically(">=", 1))
	// Let the OnRenewed of the last success, called off the loop, run.
	time.Sleep(50 * time.Millisecond)
	start := *lastStart.Load()
	g.Expect(clock.Now()).To(Equal(start.Add(300*time.Millisecond)), "the last renewal ended 300ms after it started")
	renewedBeforeFailing := cb.renewed.Load()

	clock.Set(start.Add(time.Second - time.Millisecond))
	g.Consistently(func() int32 { return cb.lost.Load() }, 200*time.Millisecond, 5*time.Millisecond).Should(BeZero(),
		"fenced before FenceAfter had passed")
	g.Expect(h.Held()).To(BeTrue())

	clock.Set(start.Add(time.Second))
	g.Expect(h.Held()).To(BeFalse(), "Held turns false the moment FenceAfter has passed")
	g.Eventually(cb.lost.Load, time.Second, 5*time.Millisecond).Should(BeEquivalentTo(1))
	clock.Add(time.Minute)
	g.Consistently(cb.lost.Load, 300*time.Millisecond, 5*time.Millisecond).Should(BeEquivalentTo(1),
		"OnLost is called once however long the failures last")
	g.Expect(h.Held()).To(BeFalse())
	g.Expect(cb.renewed.Load()).To(Equal(renewedBeforeFailing), "a failed renewal is not reported as renewed")
	g.Expect(cb.regained.Load()).To(BeEquivalentTo(1))

	api.failing.Store(false)
	// The lapsed hold's retries wait for the backoff (at most two
	// intervals on the agent's clock, which stands still here).
	clock.Add(maxLapsedWait * cfg.RenewInterval)
	g.Eventually(h.Held, time.Second, 5*time.Millisecond).Should(BeTrue())
	g.Eventually(cb.regained.Load, time.Second, 5*time.Millisecond).Should(BeEquivalentTo(2))
	g.Eventually(cb.renewed.Load, time.Second, 5*time.Millisecond).Should(BeNumerically(">=", renewedBeforeFailing+3))
	g.Consistently(cb.regained.Load, 200*time.Millisecond, 5*time.Millisecond).Should(BeEquivalentTo(2),
		"OnRegained is called once per regain, not on every renewal")
	g.Expect(cb.lost.Load()).To(BeEquivalentTo(1))

	stop()
	g.Expect(cb.renewed.Load()).To(BeNumerically("<=", api.successes.Load()), "OnRenewed follows successful renewals only")

	// The Lease is re-acquired: acquireTime moves to the regain.
	l, err := clientset.CoordinationV1().Leases(testNS).Get(context.Background(), LeaseName(testComponent, testNode), metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.Spec.AcquireTime.Time).To(BeTemporally(">=", start.Add(time.Second)))
}

// hangingLeases makes Lease updates hang until their context ends, as a
// real client does when the API server stops answering.
type hangingLeases struct {
	coordinationclient.LeasesGetter
	hang      *atomic.Bool
	lastStart *atomic.Pointer[time.Time]
}

func (h hangingLeases) Leases(ns string) coordinationclient.LeaseInterface {
	return hangingLease{h.LeasesGetter.Leases(ns), h}
}

type hangingLease struct {
	coordinationclient.LeaseInterface
	h hangingLeases
}

func (l hangingLease) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if l.h.hang.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	now := time.Now()
	l.h.lastStart.Store(&now)
	return l.LeaseInterface.Update(ctx, lease, opts)
}

// A renewal that hangs must not delay fencing: the agent fences FenceAfter
// after the start of its last successful renewal, even while the next
// renewal is still waiting for an answer.
func TestFencesOnTimeWhileARenewalHangs(t *testing.T) {
	g := NewWithT(t)
	var hang atomic.Bool
	var lastStart atomic.Pointer[time.Time]
	var cb callbacks
	cfg := cb.config(testConfig(hangingLeases{fake.NewClientset().CoordinationV1(), &hang, &lastStart}))
	cfg.Duration, cfg.RenewInterval, cfg.FenceAfter = 2*time.Second, 400*time.Millisecond, time.Second
	var lostAt atomic.Pointer[time.Time]
	cfg.OnLost = func() {
		now := time.Now()
		lostAt.Store(&now)
	}
	h, err := New(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	run(t, h)

	g.Eventually(cb.renewed.Load, 2*time.Second, 5*time.Millisecond).Should(BeNumerically(">=", 2))
	hang.Store(true)
	g.Eventually(lostAt.Load, 3*time.Second, 5*time.Millisecond).ShouldNot(BeNil())
	// The hold is checked every RenewInterval/4; allow that and some
	// scheduling slack, but not a whole renew interval.
	g.Expect(lostAt.Load().Sub(*lastStart.Load())).To(BeNumerically("<", time.Second+100*time.Millisecond+100*time.Millisecond))
}

// A refresh that hangs (the kernel, or a lock, holds up OnRenewed) must
// stop neither the renewals nor fencing: OnLost comes on time, and at
// most one OnRenewed runs at once.
func TestAHangingOnRenewedHoldsUpNothing(t *testing.T) {
	g := NewWithT(t)
	clientset := fake.NewClientset()
	api := &flakyAPI{}
	var lastSuccess atomic.Pointer[time.Time]
	api.onSuccess = func() {
		now := time.Now()
		lastSuccess.Store(&now)
	}
	api.install(clientset)
	var cb callbacks
	cfg := cb.config(testConfig(clientset.CoordinationV1()))
	cfg.Duration, cfg.RenewInterval, cfg.FenceAfter = 2*time.Second, 50*time.Millisecond, time.Second
	hang := make(chan struct{})
	var running, maxRunning atomic.Int32
	cfg.OnRenewed = func() {
		n := running.Add(1)
		defer running.Add(-1)
		if n > maxRunning.Load() {
			maxRunning.Store(n)
		}
		cb.renewed.Add(1)
		<-hang
	}
	var lostAt atomic.Pointer[time.Time]
	cfg.OnLost = func() {
		now := time.Now()
		lostAt.Store(&now)
	}
	h, err := New(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	run(t, h)
	t.Cleanup(func() { close(hang) }) // before run's cleanup stops h

	g.Eventually(cb.renewed.Load, time.Second, 5*time.Millisecond).Should(BeEquivalentTo(1))
	// OnRenewed hangs; the Lease is renewed on.
	before := api.successes.Load()
	g.Eventually(api.successes.Load, time.Second, 5*time.Millisecond).Should(BeNumerically(">=", before+5))
	g.Expect(h.Held()).To(BeTrue())

	api.failing.Store(true)
	g.Eventually(lostAt.Load, 3*time.Second, 5*time.Millisecond).ShouldNot(BeNil(), "OnLost never came")
	g.Expect(lostAt.Load().Sub(*lastSuccess.Load())).To(BeNumerically("<", time.Second+100*time.Millisecond))
	g.Expect(cb.renewed.Load()).To(BeEquivalentTo(1))
	g.Expect(maxRunning.Load()).To(BeEquivalentTo(1))
}

// A fencing that takes long (OnLost) holds up neither the renewals nor a
// later OnRegained, which follows it in order.
func TestASlowOnLostKeepsTheOrder(t *testing.T) {
	g := NewWithT(t)
	clientset := fake.NewClientset()
	api := &flakyAPI{}
	api.install(clientset)
	cfg := testConfig(clientset.CoordinationV1())
	cfg.Duration, cfg.RenewInterval, cfg.FenceAfter = 2*time.Second, 50*time.Millisecond, time.Second
	var mu sync.Mutex
	var calls []string
	record := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, s)
	}
	cfg.OnLost = func() {
		time.Sleep(500 * time.Millisecond)
		record("lost")
	}
	cfg.OnRegained = func() { record("regained") }
	h, err := New(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	run(t, h)
	g.Eventually(h.Held, time.Second, 5*time.Millisecond).Should(BeTrue())

	api.failing.Store(true)
	g.Eventually(h.Held, 2*time.Second, 5*time.Millisecond).Should(BeFalse())
	api.failing.Store(false)
	// Held again while OnLost still runs: the loop did not wait for it.
	g.Eventually(h.Held, 300*time.Millisecond, 5*time.Millisecond).Should(BeTrue())
	g.Eventually(func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(calls)
	}, 2*time.Second, 5*time.Millisecond).Should(Equal([]string{"regained", "lost", "regained"}))
}

// While Needed is false the heartbeat writes nothing at all, the hold
// lapses (OnLost, as after failed renewals), and once it turns true a
// renewal follows at once on Wake, not at the next tick.
func TestWritesNothingWhileNotNeeded(t *testing.T) {
	g := NewWithT(t)
	clientset, writes := countingClientset()
	var cb callbacks
	var needed atomic.Bool
	needed.Store(true)
	cfg := cb.config(testConfig(clientset.CoordinationV1()))
	// A long tick, so that only Wake can explain a quick renewal.
	cfg.Duration, cfg.RenewInterval, cfg.FenceAfter = 10*time.Second, 3*time.Second, 4*time.Second
	cfg.Needed = needed.Load
	h, err := New(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	run(t, h)
	g.Eventually(h.Held, time.Second, 5*time.Millisecond).Should(BeTrue())
	g.Expect(writes.Load()).To(BeEquivalentTo(1), "the first renewal creates the Lease")

	needed.Store(false)
	// Two ticks go by, and the hold lapses: nothing is written.
	g.Eventually(cb.lost.Load, 8*time.Second, 20*time.Millisecond).Should(BeEquivalentTo(1))
	g.Expect(h.Held()).To(BeFalse())
	time.Sleep(3 * time.Second)
	g.Expect(writes.Load()).To(BeEquivalentTo(1), "no write while not needed")

	needed.Store(true)
	h.Wake()
	g.Eventually(h.Held, 500*time.Millisecond, 5*time.Millisecond).Should(BeTrue(), "renewed at once on Wake")
	g.Eventually(cb.regained.Load, time.Second, 5*time.Millisecond).Should(BeEquivalentTo(2))
	g.Expect(writes.Load()).To(BeEquivalentTo(2))
}

// An idle agent (nothing held on its Lease) renews every IdleRenewInterval
// with IdleDuration written, and its hold lapses between renewals; as soon
// as it is not idle, the next tick renews at the full rate with the full
// duration. The real clock: the intervals are short and only counted.
func TestIdleRenewsRarelyWithItsOwnDuration(t *testing.T) {
	g := NewWithT(t)
	clientset, writes := countingClientset()
	var cb callbacks
	var idle atomic.Bool
	idle.Store(true)
	cfg := cb.config(testConfig(clientset.CoordinationV1()))
	cfg.Duration, cfg.RenewInterval = time.Second, 50*time.Millisecond
	// Idle renewals come an IdleRenewInterval less up to an eighth apart:
	// 1.5 s, so that even the earliest (1.3125 s) comes after the hold
	// lapsed (FenceAfter 950 ms). With 1 s, a draw of 900 ms or less
	// renewed at the 900 ms tick, before the lapse, and two such draws in
	// a row (one run in 25) failed the test.
	cfg.Idle, cfg.IdleDuration, cfg.IdleRenewInterval = idle.Load, 2*time.Second, 1500*time.Millisecond
	h, err := New(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	run(t, h)
	duration := func() int32 {
		l, err := clientset.CoordinationV1().Leases(testNS).Get(context.Background(), LeaseName(testComponent, testNode), metav1.GetOptions{})
		if err != nil || l.Spec.LeaseDurationSeconds == nil {
			return 0
		}
		return *l.Spec.LeaseDurationSeconds
	}
	g.Eventually(duration, time.Second, 5*time.Millisecond).Should(BeEquivalentTo(2))
	start := writes.Load()
	time.Sleep(2500 * time.Millisecond)
	// 50 ticks went by: one or two idle renewals, not fifty.
	g.Expect(writes.Load() - start).To(BeNumerically("<=", 3))
	g.Expect(cb.lost.Load()).To(BeNumerically(">=", 1), "the hold lapses between idle renewals")

	idle.Store(false)
	g.Eventually(duration, 500*time.Millisecond, 5*time.Millisecond).Should(BeEquivalentTo(1))
	g.Eventually(h.Held, 500*time.Millisecond, 5*time.Millisecond).Should(BeTrue())
	start = writes.Load()
	time.Sleep(time.Second)
	g.Expect(writes.Load()-start).To(BeNumerically(">=", 10), "the full rate once not idle")
	g.Expect(h.Held()).To(BeTrue())
}

// Wake writes at once even while idle: the annotations may carry news the
// controller waits for (a witness's declaration).
func TestWakeWritesWhileIdle(t *testing.T) {
	g := NewWithT(t)
	clientset, writes := countingClientset()
	cfg := testConfig(clientset.CoordinationV1())
	cfg.Duration, cfg.RenewInterval = time.Second, 50*time.Millisecond
	cfg.Idle, cfg.IdleDuration, cfg.IdleRenewInterval = func() bool { return true }, 20*time.Second, 10*time.Second
	var news atomic.Value
	news.Store("none")
	cfg.Annotations = func() map[string]string { return map[string]string{"example.com/news": news.Load().(string)} }
	h, err := New(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	run(t, h)
	g.Eventually(writes.Load, time.Second, 5*time.Millisecond).Should(BeEquivalentTo(1))
	news.Store("declared")
	h.Wake()
	g.Eventually(func() string {
		l, err := clientset.CoordinationV1().Leases(testNS).Get(context.Background(), LeaseName(testComponent, testNode), metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return l.Annotations["example.com/news"]
	}, time.Second, 5*time.Millisecond).Should(Equal("declared"))
}

// countingClientset is a fake API server that counts the writes to
// Leases (creates, updates, patches, deletes).
func countingClientset() (*fake.Clientset, *atomic.Int32) {
	clientset := fake.NewClientset()
	writes := &atomic.Int32{}
	clientset.PrependReactor("*", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			writes.Add(1)
		}
		return false, nil, nil
	})
	return clientset, writes
}

// A renewal that starts after the hold ran out, before the periodic check
// noticed, fences first and still writes: a woken one carries a witness's
// declaration, and dropping it delayed a failover by one idle renewal
// interval (7 s of outage in bench-failover's fast profile, 5 trials of
// 20, each time the witness's first renewal after its restart had lapsed
// just as it declared).
func TestWakeAfterTheHoldRanOutStillWrites(t *testing.T) {
	g := NewWithT(t)
	clock := newFakeClock()
	clientset, writes := countingClientset()
	var cb callbacks
	cfg := cb.config(testConfig(clientset.CoordinationV1()))
	cfg.Duration, cfg.RenewInterval, cfg.FenceAfter = 2*time.Second, 500*time.Millisecond, 1500*time.Millisecond
	cfg.Idle, cfg.IdleDuration, cfg.IdleRenewInterval = func() bool { return true }, 16*time.Second, 8*time.Second
	var news atomic.Value
	news.Store("none")
	cfg.Annotations = func() map[string]string { return map[string]string{"example.com/news": news.Load().(string)} }
	cfg.now = clock.Now
	h, err := New(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Driven by hand (no Start): the periodic check never runs, as when
	// the wake wins the race with it.
	h.notify.start(ctx, h.cfg.OnRenewed)
	h.renewNow(ctx, false)
	g.Expect(writes.Load()).To(BeEquivalentTo(1))
	g.Eventually(cb.regained.Load, time.Second, 5*time.Millisecond).Should(BeEquivalentTo(1))

	clock.Add(1600 * time.Millisecond) // past FenceAfter; nobody checked
	news.Store("declared")
	h.renewNow(ctx, true)
	g.Expect(writes.Load()).To(BeEquivalentTo(2), "the woken renewal was dropped")
	l, err := clientset.CoordinationV1().Leases(testNS).Get(ctx, LeaseName(testComponent, testNode), metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.Annotations["example.com/news"]).To(Equal("declared"))
	g.Expect(h.Held()).To(BeTrue())
	// Fenced first, then regained: the hold lapsed in between.
	g.Eventually(cb.lost.Load, time.Second, 5*time.Millisecond).Should(BeEquivalentTo(1))
	g.Eventually(cb.regained.Load, time.Second, 5*time.Millisecond).Should(BeEquivalentTo(2))
}

// leaseTraffic is a fake API server that counts Lease GETs and writes and
// refuses every request with 429 Too Many Requests while overloaded, as
// an API server does when its priority level's queues are full.
type leaseTraffic struct {
	overloaded         atomic.Bool
	gets, writes, sent atomic.Int32
	// retryAfter is the Retry-After of the refusals, in seconds (0: 1).
	retryAfter int
}

func (f *leaseTraffic) install(c *fake.Clientset) {
	c.PrependReactor("*", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		f.sent.Add(1)
		switch a.GetVerb() {
		case "get":
			f.gets.Add(1)
		case "create", "update":
			f.writes.Add(1)
		}
		if f.overloaded.Load() {
			return true, nil, apierrors.NewTooManyRequests("the server is overloaded", max(f.retryAfter, 1))
		}
		return false, nil, nil
	})
}

// agentHeartbeat is a heartbeat with the ip-agent's default timings, idle
// as idle says, on a fake clock, driven by hand (no Start): each tick is a
// renewNow.
func agentHeartbeat(t *testing.T, api *leaseTraffic, clock *fakeClock, cb *callbacks, idle bool) (*Heartbeat, func(woken bool)) {
	t.Helper()
	clientset := fake.NewClientset()
	api.install(clientset)
	cfg := cb.config(testConfig(clientset.CoordinationV1()))
	cfg.Duration, cfg.RenewInterval, cfg.FenceAfter = 2*time.Second, 500*time.Millisecond, 1500*time.Millisecond
	cfg.Idle, cfg.IdleDuration, cfg.IdleRenewInterval = func() bool { return idle }, 16*time.Second, 8*time.Second
	cfg.now = clock.Now
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h.notify.start(ctx, h.cfg.OnRenewed)
	return h, func(woken bool) { h.renewNow(ctx, woken) }
}

// An overloaded API server is not asked more by the agents it refuses:
// an idle renewal that fails is tried again after a growing wait, not at
// every tick (which took 1,000 agents from 125 renewals a second to
// thousands of requests a second in make bench-scale, and the API server
// never recovered), and without a GET before each update. The attempts
// still come often enough to renew before the idle Lease runs out, and
// once the server answers again renewals return to their pace.
func TestIdleRenewalsBackOffWhileTheAPIServerRefuses(t *testing.T) {
	g := NewWithT(t)
	clock := newFakeClock()
	api := &leaseTraffic{}
	var cb callbacks
	h, tick := agentHeartbeat(t, api, clock, &cb, true)
	tick(false)
	g.Expect(api.writes.Load()).To(BeEquivalentTo(1), "the first renewal creates the Lease")
	renewed := clock.Now()

	// The idle renewal falls due within its interval, not before its
	// jittered seven eighths.
	for clock.Now().Sub(renewed) < 7*time.Second {
		clock.Add(500 * time.Millisecond)
		tick(false)
	}
	g.Expect(api.sent.Load()).To(BeEquivalentTo(2), "no request before the idle renewal is due (a GET that found nothing, a create)")

	api.overloaded.Store(true)
	sent := api.sent.Load()
	var attempts int32
	for clock.Now().Sub(renewed) < 16*time.Second {
		clock.Add(500 * time.Millisecond)
		before := api.sent.Load()
		tick(false)
		if api.sent.Load() > before {
			attempts++
		}
	}
	// 16 ticks between the due time and the Lease's end: at every tick
	// that would be 16 attempts, each a GET and an update.
	g.Expect(attempts).To(And(BeNumerically(">=", 3), BeNumerically("<=", 7)),
		"attempts of the idle renewal in its last 8 s: at least a few, far fewer than the ticks")
	g.Expect(api.gets.Load()).To(BeEquivalentTo(1), "a refused update needs no GET: the Lease did not change")
	g.Expect(api.sent.Load()-sent).To(BeEquivalentTo(attempts), "one request per attempt")

	api.overloaded.Store(false)
	for range 8 { // past the backoff's cap
		clock.Add(500 * time.Millisecond)
		tick(false)
	}
	writes, last := api.writes.Load(), h.lastStart
	g.Expect(last).To(BeTemporally(">", renewed.Add(16*time.Second)), "renewed once the server answers")
	// Back to the idle pace: nothing more for seven seconds after it.
	for clock.Now().Add(500*time.Millisecond).Sub(last) < 7*time.Second {
		clock.Add(500 * time.Millisecond)
		tick(false)
	}
	g.Expect(api.writes.Load()).To(Equal(writes), "the backoff did not end with the success")
}

// A woken renewal carries news (a witness's declaration, which the
// controller waits for to fail over): it goes at once, whatever the idle
// pace and the backoff say. If it fails, its retries do not wait for the
// idle renewal to fall due, but they do wait for the backoff: at 1,000
// nodes agents retrying their news at every tick kept an overloaded API
// server from recovering.
func TestNewsIsNotHeldUpByTheIdlePace(t *testing.T) {
	g := NewWithT(t)
	clock := newFakeClock()
	api := &leaseTraffic{}
	var cb callbacks
	h, tick := agentHeartbeat(t, api, clock, &cb, true)
	tick(false)
	clock.Add(time.Second)

	api.overloaded.Store(true)
	sent := api.sent.Load()
	tick(true)
	g.Expect(api.sent.Load()).To(Equal(sent+1), "the woken renewal went out at once")
	for range 12 {
		clock.Add(500 * time.Millisecond)
		tick(false)
	}
	// 6 s, idle renewal not due: the backoff (500 ms doubling to 2 s,
	// jittered up to half more) allows 3 to 6 retries, not 12.
	g.Expect(api.sent.Load()-sent-1).To(And(BeNumerically(">=", 3), BeNumerically("<=", 6)),
		"the failed news is tried as the backoff allows, though the idle renewal is not due")
	before := api.sent.Load()
	tick(true)
	g.Expect(api.sent.Load()).To(Equal(before+1), "new news goes at once, whatever the backoff")
	api.overloaded.Store(false)
	for clock.Add(500 * time.Millisecond); api.writes.Load() == 0 || h.news; clock.Add(500 * time.Millisecond) {
		tick(false)
	}
	writes := api.writes.Load()
	clock.Add(500 * time.Millisecond)
	tick(false)
	g.Expect(api.writes.Load()).To(Equal(writes), "once the news landed, the idle pace again")
}

// A renewal that keeps a hold on the Lease is never held back: every tick
// tries while the hold lasts, overloaded server or not. Once it has
// lapsed, the retries wait for the backoff, at most two intervals, so that
// the node regains its hold soon after the server answers again.
func TestFullRateRenewalsAreNotBackedOffWhileHeld(t *testing.T) {
	g := NewWithT(t)
	clock := newFakeClock()
	api := &leaseTraffic{}
	var cb callbacks
	h, tick := agentHeartbeat(t, api, clock, &cb, false)
	tick(false)
	api.overloaded.Store(true)
	sent := api.sent.Load()
	for h.Held() {
		clock.Add(500 * time.Millisecond)
		tick(false)
	}
	held := api.sent.Load() - sent
	// The ticks strictly within the hold (the last one falls at its end).
	g.Expect(held).To(BeEquivalentTo(h.cfg.FenceAfter/(500*time.Millisecond)-1), "a tick without an attempt while the hold lasted")

	for range 20 {
		clock.Add(500 * time.Millisecond)
		tick(false)
	}
	g.Expect(api.sent.Load()-sent-held).To(And(BeNumerically(">=", 7), BeNumerically("<=", 10)),
		"lapsed: one attempt every two ticks at most (20 ticks), none held back longer")

	api.overloaded.Store(false)
	clock.Add(500 * time.Millisecond)
	tick(false)
	clock.Add(500 * time.Millisecond)
	tick(false)
	g.Expect(h.Held()).To(BeTrue(), "regained within two ticks of the server answering")
}

// slowLeases answers Lease updates after delay, as an API server queueing
// its requests does; an update whose context ends first is not made.
type slowLeases struct {
	coordinationclient.LeasesGetter
	delay             time.Duration
	updates, failures *atomic.Int32
}

func (s slowLeases) Leases(ns string) coordinationclient.LeaseInterface {
	return slowLease{s.LeasesGetter.Leases(ns), s}
}

type slowLease struct {
	coordinationclient.LeaseInterface
	s slowLeases
}

func (l slowLease) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	l.s.updates.Add(1)
	select {
	case <-ctx.Done():
		l.s.failures.Add(1)
		return nil, ctx.Err()
	case <-time.After(l.s.delay):
	}
	return l.LeaseInterface.Update(ctx, lease, opts)
}

// An idle renewal keeps no hold on the Lease, so it may wait for a slow
// API server longer than the hold lasts: abandoned at FenceAfter, as a
// renewal that keeps a hold must be, it would fail every time the server
// takes longer than that (and at scale, landing all the same, cost a
// conflict and a read each: most of the Lease traffic in bench-scale at
// 1,000 nodes). A success that came after FenceAfter holds nothing: it
// does not call OnRegained. The hold still lapses on time meanwhile.
func TestAnIdleRenewalMayWaitLongerThanTheHold(t *testing.T) {
	g := NewWithT(t)
	var updates, failures atomic.Int32
	var cb callbacks
	cfg := cb.config(testConfig(slowLeases{fake.NewClientset().CoordinationV1(), 400 * time.Millisecond, &updates, &failures}))
	cfg.Duration, cfg.RenewInterval, cfg.FenceAfter = time.Second, 100*time.Millisecond, 300*time.Millisecond
	// Idle writes may take a quarter of 2 s: 500 ms, more than the 400 ms
	// the server takes and than the 300 ms the hold lasts.
	cfg.Idle, cfg.IdleDuration, cfg.IdleRenewInterval = func() bool { return true }, 4*time.Second, 2*time.Second
	var lostAt atomic.Pointer[time.Time]
	cfg.OnLost = func() {
		now := time.Now()
		lostAt.CompareAndSwap(nil, &now)
		cb.lost.Add(1)
	}
	h, err := New(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	started := time.Now()
	run(t, h) // the first renewal creates the Lease, at once
	g.Eventually(cb.regained.Load, time.Second, 5*time.Millisecond).Should(BeEquivalentTo(1))
	g.Eventually(lostAt.Load, time.Second, 5*time.Millisecond).ShouldNot(BeNil())
	g.Expect(lostAt.Load().Sub(started)).To(BeNumerically("<", 300*time.Millisecond+150*time.Millisecond), "the hold lapsed on time")

	g.Eventually(func() int32 { return updates.Load() - failures.Load() }, 5*time.Second, 10*time.Millisecond).Should(BeNumerically(">=", 2),
		"two idle renewals landed")
	g.Expect(failures.Load()).To(BeZero(), "an idle renewal was abandoned before the server answered")
	g.Expect(cb.regained.Load()).To(BeEquivalentTo(1), "a renewal that landed after the hold would have lapsed held nothing")
	g.Expect(h.Held()).To(BeFalse())
}

// rvLeases is a fake API server for one Lease that, as a real one does,
// refuses an update made from an old resourceVersion, applies JSON patches
// (refusing one whose test fails, with 422 as kube-apiserver does), and
// can lose its answer to a write it made (the client gave up, the server
// went on).
type rvLeases struct {
	mu                              sync.Mutex
	lease                           *coordinationv1.Lease
	rv                              int
	loseAnswer                      atomic.Bool
	gets, conflicts, wrote, patches atomic.Int32
	refusedPatches                  atomic.Int32
}

func (f *rvLeases) install(c *fake.Clientset) {
	c.PrependReactor("*", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		gr := coordinationv1.Resource("leases")
		var l *coordinationv1.Lease
		switch a.GetVerb() {
		case "get":
			f.gets.Add(1)
			if f.lease == nil {
				return true, nil, apierrors.NewNotFound(gr, a.(clienttesting.GetAction).GetName())
			}
			return true, f.lease.DeepCopy(), nil
		case "create":
			l = a.(clienttesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		case "update":
			l = a.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
			if f.lease == nil || l.ResourceVersion != f.lease.ResourceVersion {
				f.conflicts.Add(1)
				return true, nil, apierrors.NewConflict(gr, l.Name, errors.New("the object has been modified"))
			}
		case "patch":
			f.patches.Add(1)
			pa := a.(clienttesting.PatchAction)
			if f.lease == nil {
				return true, nil, apierrors.NewNotFound(gr, pa.GetName())
			}
			if pa.GetPatchType() != types.JSONPatchType {
				return true, nil, apierrors.NewBadRequest("only JSON patches here")
			}
			var err error
			if l, err = applyJSONPatch(f.lease, pa.GetPatch()); err != nil {
				f.refusedPatches.Add(1)
				return true, nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", gr, pa.GetName(), err.Error(), 0, false)
			}
		default:
			return false, nil, nil
		}
		f.rv++
		f.lease = l
		f.lease.ResourceVersion = strconv.Itoa(f.rv)
		f.wrote.Add(1)
		if f.loseAnswer.Load() {
			return true, nil, context.DeadlineExceeded
		}
		return true, f.lease.DeepCopy(), nil
	})
}

func applyJSONPatch(l *coordinationv1.Lease, patch []byte) (*coordinationv1.Lease, error) {
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, err
	}
	doc, err := json.Marshal(l)
	if err != nil {
		return nil, err
	}
	if doc, err = p.Apply(doc); err != nil {
		return nil, err
	}
	out := &coordinationv1.Lease{}
	return out, json.Unmarshal(doc, out)
}

// rvHeartbeat is a heartbeat with the ip-agent's idle timings against api,
// on clock, driven by hand; annotations are what it writes.
func rvHeartbeat(t *testing.T, api *rvLeases, clock *fakeClock, annotations func() map[string]string) (renew func()) {
	t.Helper()
	clientset := fake.NewClientset()
	api.install(clientset)
	var cb callbacks
	cfg := cb.config(testConfig(clientset.CoordinationV1()))
	cfg.Duration, cfg.RenewInterval, cfg.FenceAfter = 2*time.Second, 500*time.Millisecond, 1500*time.Millisecond
	cfg.Idle, cfg.IdleDuration, cfg.IdleRenewInterval = func() bool { return true }, 16*time.Second, 8*time.Second
	cfg.Annotations = annotations
	cfg.now = clock.Now
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h.notify.start(ctx, h.cfg.OnRenewed)
	return func() { h.renewNow(ctx, true) }
}

// A renewal whose answer never came has usually landed (the API server
// goes on with a write its client gave up on): the next one neither
// updates from the copy that write made stale (a conflict, then a read,
// then the update) nor reads first (at 1,000 nodes those reads were
// refused by the overloaded API server and starved the renewals): it is
// one request, a patch tested on the run's incarnation. Then renewals are
// updates again, from the patch's answer.
func TestARenewalWhoseOutcomeIsUnknownNeedsNoRead(t *testing.T) {
	g := NewWithT(t)
	clock := newFakeClock()
	api := &rvLeases{}
	renew := rvHeartbeat(t, api, clock, nil)
	renew()
	g.Expect(api.wrote.Load()).To(BeEquivalentTo(1), "created")

	api.loseAnswer.Store(true)
	clock.Add(time.Second)
	renew()
	g.Expect(api.wrote.Load()).To(BeEquivalentTo(2), "the renewal landed, its answer lost")
	api.loseAnswer.Store(false)
	gets := api.gets.Load()
	clock.Add(time.Second)
	renew()
	g.Expect(api.patches.Load()).To(BeEquivalentTo(1), "the next renewal patched")
	g.Expect(api.wrote.Load()).To(BeEquivalentTo(3), "and landed")
	g.Expect(api.lease.Spec.RenewTime.Time).To(BeTemporally("==", clock.Now()))
	clock.Add(time.Second)
	renew()
	g.Expect(api.wrote.Load()).To(BeEquivalentTo(4), "renewed again")
	g.Expect(api.patches.Load()).To(BeEquivalentTo(1), "by an update from the patch's answer")
	g.Expect(api.conflicts.Load()).To(BeZero(), "updated from a stale copy")
	g.Expect(api.gets.Load()).To(Equal(gets), "read the Lease")

	// A conflict (a write of ours landed late) is followed by a patch too.
	api.lease.ResourceVersion += "0"
	clock.Add(time.Second)
	renew()
	g.Expect(api.conflicts.Load()).To(BeEquivalentTo(1))
	clock.Add(time.Second)
	renew()
	g.Expect(api.patches.Load()).To(BeEquivalentTo(2))
	g.Expect(api.wrote.Load()).To(BeEquivalentTo(5))
	g.Expect(api.gets.Load()).To(Equal(gets), "read the Lease")
}

// A patch without a read must not land on the Lease of another run of the
// agent (a restart took over while this run's answer was lost): its test
// on the incarnation fails, nothing is written, and the next renewal reads
// the Lease.
func TestAPatchDoesNotLandOnAnotherRunsLease(t *testing.T) {
	g := NewWithT(t)
	clock := newFakeClock()
	api := &rvLeases{}
	renewOld := rvHeartbeat(t, api, clock, nil)
	renewOld()
	api.loseAnswer.Store(true)
	clock.Add(time.Second)
	renewOld()
	api.loseAnswer.Store(false)

	renewNew := rvHeartbeat(t, api, clock, nil)
	clock.Add(time.Second)
	renewNew()
	took := api.lease.DeepCopy()
	g.Expect(took.Annotations[AnnotationIncarnation]).NotTo(BeEmpty())

	clock.Add(time.Second)
	renewOld()
	g.Expect(api.patches.Load()).To(BeEquivalentTo(1))
	g.Expect(api.refusedPatches.Load()).To(BeEquivalentTo(1), "the old run's patch was refused")
	g.Expect(api.lease.Spec.RenewTime).To(Equal(took.Spec.RenewTime), "the old run wrote the new one's Lease")
	gets := api.gets.Load()
	clock.Add(time.Second)
	renewOld()
	g.Expect(api.gets.Load()).To(Equal(gets+1), "the old run reads the Lease before it writes again")
}

// News (a witness's declaration) never goes by a patch without a read: a
// late write could take it back, and a restarted agent reads its
// declarations back before it vouches. After a lost answer, a renewal
// with new annotations reads the Lease and updates it.
func TestNewsAfterALostAnswerIsReadAndUpdated(t *testing.T) {
	g := NewWithT(t)
	clock := newFakeClock()
	api := &rvLeases{}
	declared := "node-2=1"
	renew := rvHeartbeat(t, api, clock, func() map[string]string { return map[string]string{"declared": declared} })
	renew()
	api.loseAnswer.Store(true)
	clock.Add(time.Second)
	renew()
	api.loseAnswer.Store(false)

	declared = "node-2=1,node-3=7"
	gets := api.gets.Load()
	clock.Add(time.Second)
	renew()
	g.Expect(api.patches.Load()).To(BeZero(), "news went by a patch")
	g.Expect(api.gets.Load()).To(Equal(gets + 1))
	g.Expect(api.lease.Annotations).To(HaveKeyWithValue("declared", declared))
	g.Expect(api.conflicts.Load()).To(BeZero())
}

// An idle renewal refused with a Retry-After longer than the backoff's
// step waits that long: the API server knows its load better than the
// backoff does.
func TestIdleRenewalsWaitTheRetryAfter(t *testing.T) {
	g := NewWithT(t)
	clock := newFakeClock()
	api := &leaseTraffic{retryAfter: 3}
	var cb callbacks
	_, tick := agentHeartbeat(t, api, clock, &cb, true)
	tick(false)
	clock.Add(8 * time.Second) // the idle renewal is due
	api.overloaded.Store(true)
	var at []time.Duration
	for elapsed := time.Duration(0); elapsed < 8*time.Second; elapsed += 500 * time.Millisecond {
		before := api.sent.Load()
		tick(false)
		if api.sent.Load() > before {
			at = append(at, elapsed)
		}
		clock.Add(500 * time.Millisecond)
	}
	g.Expect(at).To(Equal([]time.Duration{0, 3 * time.Second, 6 * time.Second}),
		"attempts in the 8 s after the idle renewal fell due, refused with Retry-After: 3")
}
