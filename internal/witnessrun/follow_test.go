package witnessrun

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubext/kubext/internal/netconf"
	"github.com/kubext/kubext/internal/witness"
)

// fakeAgent holds on its witnesses' word while holds is set.
type fakeAgent struct {
	holds, quorum atomic.Bool
	pokes         atomic.Int32
}

func (a *fakeAgent) HoldsOnWitnesses() bool { return a.holds.Load() }
func (a *fakeAgent) QuorumReached() bool    { return a.quorum.Load() }
func (a *fakeAgent) HoldDeadline(time.Time, time.Duration) time.Time {
	return time.Now().Add(time.Hour)
}
func (a *fakeAgent) Poke() { a.pokes.Add(1) }

// fakeDataplane records the refreshes, with when the last full one was.
type fakeDataplane struct {
	mu          sync.Mutex
	full, gates int
	fullTimes   []time.Time
	lapsed      bool
}

func (d *fakeDataplane) Refresh() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.full++
	d.fullTimes = append(d.fullTimes, time.Now())
	if d.lapsed {
		return netconf.ErrLapsed
	}
	return nil
}

func (d *fakeDataplane) RefreshGate() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gates++
	return nil
}

func (d *fakeDataplane) counts() (full, gates int, times []time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.full, d.gates, append([]time.Time(nil), d.fullTimes...)
}

func startFollow(t *testing.T, timing witness.Timing) (*Run, *fakeAgent, *fakeDataplane) {
	t.Helper()
	a, d := &fakeAgent{}, &fakeDataplane{}
	w := &Run{timing: timing, vouched: make(chan struct{}, 1), agent: a, dp: d}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.follow(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, a, d
}

func (w *Run) vouch() {
	select {
	case w.vouched <- struct{}{}:
	default:
	}
}

// A holder's whole data plane (address lifetimes, NAT timeouts: whole
// seconds) is refreshed on a clock of its own, not only when witnesses
// vouch: at a probe interval of a second, vouches a second apart would let
// one-second lifetimes lapse under a live hold. Vouches move the gate.
func TestFullRefreshesDoNotWaitForVouches(t *testing.T) {
	slow := witness.Timing{ProbeInterval: time.Second, HoldFor: 2 * time.Second, SilentAfter: 3 * time.Second,
		FenceSlack: 100 * time.Millisecond, Drift: 1e-3}
	if err := slow.Validate(); err != nil {
		t.Fatal(err)
	}
	w, a, d := startFollow(t, slow)
	a.holds.Store(true)
	w.vouch()
	start := time.Now()
	time.Sleep(1300 * time.Millisecond) // no vouch meanwhile
	full, gates, times := d.counts()
	if gates != 1 {
		t.Errorf("%d gate refreshes for one vouch", gates)
	}
	if full < 2 {
		t.Fatalf("%d full refreshes in 1.3 s without vouches: the lifetimes would lapse", full)
	}
	// No gap between full refreshes (or before the first) that lets a
	// one-second lifetime run out (the kernel removes an address up to
	// 20 ms early): three periods leave room for a loaded machine.
	prev := start
	for _, at := range times {
		if gap := at.Sub(prev); gap > 3*fullRefreshEvery {
			t.Errorf("%s between full refreshes", gap)
		}
		prev = at
	}
}

// Nothing is refreshed for a node that holds nothing on its witnesses'
// word, vouched for or not, and a vouch pokes the agent only when a claim
// waited for that quorum.
func TestNoRefreshWithoutAWitnessHold(t *testing.T) {
	w, a, d := startFollow(t, witness.DefaultTiming())
	for range 5 {
		w.vouch()
		time.Sleep(60 * time.Millisecond)
	}
	if full, gates, _ := d.counts(); full+gates != 0 {
		t.Errorf("refreshed %d times whole and %d the gate while holding nothing", full, gates)
	}
	if n := a.pokes.Load(); n != 0 {
		t.Errorf("%d pokes with no claim waiting", n)
	}
	a.quorum.Store(true)
	w.vouch()
	deadline := time.Now().Add(5 * time.Second)
	for a.pokes.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if a.pokes.Load() == 0 {
		t.Error("a claim waiting for the quorum was not poked")
	}
}

// A lapse found by a full refresh asks the agent for a pass (to apply
// again).
func TestALapseFoundPokes(t *testing.T) {
	_, a, d := startFollow(t, witness.DefaultTiming())
	d.mu.Lock()
	d.lapsed = true
	d.mu.Unlock()
	a.holds.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for a.pokes.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if a.pokes.Load() == 0 {
		t.Error("a lapsed data plane was not re-applied")
	}
}
