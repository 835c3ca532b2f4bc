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

// fakeAgent holds on its witnesses' word while holds is set, until an
// hour from now, or until the end set in until (unix nanoseconds).
type fakeAgent struct {
	holds, quorum atomic.Bool
	pokes         atomic.Int32
	until         atomic.Int64
}

func (a *fakeAgent) HoldsOnWitnesses() bool { return a.holds.Load() }
func (a *fakeAgent) QuorumReached() bool    { return a.quorum.Load() }
func (a *fakeAgent) HoldDeadline(time.Time, time.Duration) time.Time {
	if u := a.until.Load(); u != 0 {
		return time.Unix(0, u)
	}
	return time.Now().Add(time.Hour)
}
func (a *fakeAgent) Poke() { a.pokes.Add(1) }

// fakeDataplane records the refreshes, with when the last full one was.
type fakeDataplane struct {
	mu          sync.Mutex
	full, gates int
	fullTimes   []time.Time
	lapsed      bool
	// agent, when set, is read for the deadline each gate refresh
	// writes (gateDeadline), as netconf's GateDeadline is.
	agent        *fakeAgent
	gateDeadline time.Time
}

func (d *fakeDataplane) Refresh() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.full++
	d.fullTimes = append(d.fullTimes, time.Now())
	if d.agent != nil {
		d.gateDeadline = d.agent.HoldDeadline(time.Time{}, 0)
	}
	if d.lapsed {
		return netconf.ErrLapsed
	}
	return nil
}

func (d *fakeDataplane) RefreshGate() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gates++
	if d.agent != nil {
		d.gateDeadline = d.agent.HoldDeadline(time.Time{}, 0)
	}
	return nil
}

// kernelGate is the deadline the last gate refresh wrote.
func (d *fakeDataplane) kernelGate() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gateDeadline
}

func (d *fakeDataplane) counts() (full, gates int, times []time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.full, d.gates, append([]time.Time(nil), d.fullTimes...)
}

func startFollow(t *testing.T, timing witness.Timing) (*Run, *fakeAgent, *fakeDataplane) {
	t.Helper()
	a := &fakeAgent{}
	d := &fakeDataplane{agent: a}
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

// Vouches move the kernel's gate only as its deadline nears: a holder
// vouched for every 5 ms (a hold of 300 ms) writes the gate a few times a
// second, not on every vouch, and the deadline in the kernel never falls
// nearer than half the hold while the vouches come. A hold's end that
// moves back (a new generation) is written at the next vouch.
func TestVouchesMoveTheGateAsItNears(t *testing.T) {
	timing := witness.DefaultTiming()
	w, a, d := startFollow(t, timing)
	a.holds.Store(true)
	vouches, nearest := 0, time.Hour
	for start := time.Now(); time.Since(start) < time.Second; vouches++ {
		a.until.Store(time.Now().Add(timing.HoldFor).UnixNano())
		w.vouch()
		time.Sleep(5 * time.Millisecond)
		if gate := d.kernelGate(); !gate.IsZero() {
			nearest = min(nearest, time.Until(gate))
		}
	}
	_, gates, _ := d.counts()
	t.Logf("%d vouches, %d gate writes, the kernel's deadline at least %s ahead", vouches, gates, nearest)
	if gates > vouches/4 {
		t.Errorf("%d gate writes for %d vouches: the gate is still written on (nearly) every vouch", gates, vouches)
	}
	if nearest < timing.HoldFor/2 {
		t.Errorf("the kernel's deadline came within %s while vouches kept coming", nearest)
	}

	// A restart: the hold's end moves back, and the next vouch writes it.
	back := time.Now().Add(10 * time.Millisecond)
	a.until.Store(back.UnixNano())
	w.vouch()
	deadline := time.Now().Add(5 * time.Second)
	for !d.kernelGate().Equal(back) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := d.kernelGate(); !got.Equal(back) {
		t.Errorf("the gate holds %s after the hold's end moved back to %s", got, back)
	}
}

func TestGateIsKeptAheadByAtLeastTwoProbes(t *testing.T) {
	for _, c := range []struct {
		probe, hold, ahead time.Duration
	}{
		{50 * time.Millisecond, 300 * time.Millisecond, 225 * time.Millisecond},
		{10 * time.Millisecond, 80 * time.Millisecond, 60 * time.Millisecond},
		{50 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}, // the limit: every vouch
		{time.Second, 2 * time.Second, 2 * time.Second},
	} {
		if got := gateAhead(witness.Timing{ProbeInterval: c.probe, HoldFor: c.hold}); got != c.ahead {
			t.Errorf("probe %s, hold %s: the gate kept %s ahead, want %s", c.probe, c.hold, got, c.ahead)
		}
	}
}

func TestGateWritesAreDueAsTheDeadlineNears(t *testing.T) {
	now := time.Now()
	g := gateWrites{ahead: 225 * time.Millisecond}
	for _, c := range []struct {
		name     string
		last     time.Time
		deadline time.Time
		due      bool
	}{
		{"nothing written", time.Time{}, now.Add(300 * time.Millisecond), true},
		{"written far ahead", now.Add(290 * time.Millisecond), now.Add(300 * time.Millisecond), false},
		{"written, nearing", now.Add(200 * time.Millisecond), now.Add(300 * time.Millisecond), true},
		{"written, passed", now.Add(-time.Millisecond), now.Add(300 * time.Millisecond), true},
		{"the hold moved back", now.Add(290 * time.Millisecond), now.Add(100 * time.Millisecond), true},
		{"the hold is gone", now.Add(290 * time.Millisecond), time.Time{}, true},
	} {
		g.last = c.last
		if got := g.due(c.deadline, now); got != c.due {
			t.Errorf("%s: due %v, want %v", c.name, got, c.due)
		}
	}
}
