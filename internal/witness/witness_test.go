package witness

import (
	"strings"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestDefaultTimingIsSafe(t *testing.T) {
	if err := DefaultTiming().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestTimingValidateRefuses(t *testing.T) {
	ok := DefaultTiming()
	for name, tc := range map[string]struct {
		mutate func(*Timing)
		want   string
	}{
		"silent-after within hold + slack": {func(t *Timing) { t.SilentAfter = t.HoldFor + t.FenceSlack }, "too short"},
		// With 5 % drift, 300 + 100 ms stretch to 420 ms and 430 ms
		// shrink below it: the margin must cover the rates, not only
		// the durations.
		"no margin for drift":     {func(t *Timing) { t.Drift = 0.05; t.SilentAfter = ms(430) }, "too short"},
		"probe interval too long": {func(t *Timing) { t.ProbeInterval = t.HoldFor }, "half the hold"},
		"zero hold":               {func(t *Timing) { t.HoldFor = 0 }, "must be positive"},
		"negative slack":          {func(t *Timing) { t.FenceSlack = -1 }, "not negative"},
		"absurd drift":            {func(t *Timing) { t.Drift = 0.5 }, "clock drift"},
	} {
		t.Run(name, func(t *testing.T) {
			tm := ok
			tc.mutate(&tm)
			err := tm.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestNextGenNeverGoesBack(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g := NextGen(0, now)
	if g2 := NextGen(g, now.Add(-time.Hour)); g2 <= g {
		t.Fatalf("after a clock step back NextGen(%d) = %d", g, g2)
	}
	if g3 := NextGen(g, now.Add(time.Second)); g3 <= g {
		t.Fatalf("NextGen(%d) = %d", g, g3)
	}
}

func TestWitnessVouchesUntilSilentThenNever(t *testing.T) {
	tm := DefaultTiming()
	w := NewWitness(tm, nil)
	t0 := time.Unix(0, 0)
	if a := w.Probe("a", 5, 1, t0); !a.Vouch {
		t.Fatal("first probe not vouched")
	}
	if got := w.Tick(t0.Add(tm.SilentAfter - time.Millisecond)); len(got) != 0 {
		t.Fatalf("declared %v before SilentAfter", got)
	}
	got := w.Tick(t0.Add(tm.SilentAfter))
	if len(got) != 1 || got[0] != (Hold{Node: "a", Gen: 5}) {
		t.Fatalf("Tick = %v, want a/5 declared", got)
	}
	// W1: never again for that generation or an earlier one.
	for _, g := range []Gen{5, 4, 1} {
		if a := w.Probe("a", g, 2, t0.Add(time.Hour)); a.Vouch || a.Declared != 5 {
			t.Fatalf("probe of gen %d after the declaration: %+v", g, a)
		}
	}
	// A later generation is a new session.
	if a := w.Probe("a", 6, 1, t0.Add(time.Hour)); !a.Vouch || a.Declared != 5 {
		t.Fatalf("probe of gen 6: %+v", a)
	}
}

// A witness frozen for seconds (SIGSTOP, a starved process) wakes up with
// the probes it missed still in its socket: its first Tick may run before
// it reads them, and must not declare a holder that probed all along. It
// declares one that really went silent once it has listened for
// SilentAfter since it woke (less what it had heard before it froze).
func TestAWitnessDoesNotCountItsOwnPauseAsSilence(t *testing.T) {
	tm := DefaultTiming()
	w := NewWitness(tm, nil)
	t0 := time.Unix(0, 0)
	w.Probe("alive", 3, 1, t0)
	w.Probe("dead", 4, 1, t0)
	w.Tick(t0.Add(tm.ProbeInterval))
	woke := t0.Add(5 * time.Second) // frozen since the tick above
	if got := w.Tick(woke); len(got) != 0 {
		t.Fatalf("the woken witness declared %v before reading what it missed", got)
	}
	if a := w.Probe("alive", 3, 2, woke.Add(time.Millisecond)); !a.Vouch {
		t.Fatalf("the live holder's queued probe after the pause: %+v", a)
	}
	var declared []Hold
	for now := woke.Add(tm.ProbeInterval); now.Before(woke.Add(2 * tm.SilentAfter)); now = now.Add(tm.ProbeInterval) {
		w.Probe("alive", 3, uint64(now.Sub(woke)/tm.ProbeInterval)+2, now)
		for _, h := range w.Tick(now) {
			// Listened to before the pause: one interval, and one more
			// counted of the gap.
			if h.Node == "dead" && now.Sub(woke) < tm.SilentAfter-2*tm.ProbeInterval {
				t.Fatalf("dead declared %s after the wake: it was listened to for %s before, SilentAfter is %s",
					now.Sub(woke), 2*tm.ProbeInterval, tm.SilentAfter)
			}
			if h.Node == "dead" && now.Sub(woke) > tm.SilentAfter {
				t.Fatalf("dead declared only %s after the wake (SilentAfter %s)", now.Sub(woke), tm.SilentAfter)
			}
			declared = append(declared, h)
		}
	}
	if len(declared) != 1 || declared[0] != (Hold{Node: "dead", Gen: 4}) {
		t.Fatalf("declared %v, want only dead/4", declared)
	}
}

func TestWitnessRestartKeepsDeclarations(t *testing.T) {
	w := NewWitness(DefaultTiming(), map[string]Gen{"a": 7})
	if a := w.Probe("a", 7, 1, time.Unix(0, 0)); a.Vouch {
		t.Fatal("a restarted witness vouched for a generation it had declared")
	}
}

func TestWitnessRefusesAStaleGeneration(t *testing.T) {
	w := NewWitness(DefaultTiming(), nil)
	t0 := time.Unix(0, 0)
	w.Probe("a", 9, 1, t0)
	if a := w.Probe("a", 8, 2, t0.Add(time.Millisecond)); a.Vouch {
		t.Fatal("vouched for gen 8 after hearing gen 9")
	}
	// ... and the stale probe does not keep gen 9 alive.
	if got := w.Tick(t0.Add(DefaultTiming().SilentAfter)); len(got) != 1 {
		t.Fatalf("Tick = %v", got)
	}
}

func TestHolderNeedsAQuorumCountedFromTheSend(t *testing.T) {
	tm := DefaultTiming()
	h := NewHolder(tm, 3)
	t0 := time.Unix(0, 0)
	ws := []string{"b", "c", "d"}
	sb := h.Probe("b", t0)
	sc := h.Probe("c", t0.Add(ms(10)))
	sd := h.Probe("d", t0.Add(ms(20)))
	if !h.HeldUntil(ws).IsZero() {
		t.Fatal("held before any vouch")
	}
	// Answers arrive late: the hold still counts from the sends.
	h.Answered("b", sb, Answer{Vouch: true})
	if !h.HeldUntil(ws).IsZero() {
		t.Fatal("held on one vouch out of three")
	}
	h.Answered("d", sd, Answer{Vouch: true})
	if got, want := h.HeldUntil(ws), t0.Add(tm.HoldFor); !got.Equal(want) {
		t.Fatalf("HeldUntil = %v, want %v (the second-latest send, b's, plus HoldFor)", got, want)
	}
	h.Answered("c", sc, Answer{Vouch: true})
	if got, want := h.HeldUntil(ws), t0.Add(ms(10)+tm.HoldFor); !got.Equal(want) {
		t.Fatalf("HeldUntil = %v, want %v", got, want)
	}
}

func TestHolderIgnoresForeignAndMismatchedAnswers(t *testing.T) {
	tm := DefaultTiming()
	h := NewHolder(tm, 3)
	t0 := time.Unix(0, 0)
	s := h.Probe("b", t0)
	h.Answered("c", s, Answer{Vouch: true})     // c answers b's probe
	h.Answered("b", s+100, Answer{Vouch: true}) // a probe never sent
	h.Answered("b", s, Answer{Vouch: false})    // a refusal
	if !h.HeldUntil([]string{"b"}).IsZero() {
		t.Fatal("held without a matching vouch")
	}
}

func TestHolderLostWhenAWitnessDeclaredIt(t *testing.T) {
	tm := DefaultTiming()
	h := NewHolder(tm, 3)
	t0 := time.Unix(0, 0)
	s1, s2 := h.Probe("b", t0), h.Probe("c", t0)
	h.Answered("b", s1, Answer{Vouch: true})
	if lost := h.Answered("c", s2, Answer{Declared: 3}); !lost {
		t.Fatal("not lost after c declared gen 3")
	}
	if !h.HeldUntil([]string{"b"}).IsZero() {
		t.Fatal("a lost generation still holds")
	}
}

func TestMayMoveNeedsAQuorumOfTheHoldsWitnesses(t *testing.T) {
	pub := map[string]map[string]Gen{"b": {"a": 4}, "c": {"a": 3}, "d": {"a": 5}}
	declared := func(w, n string) Gen { return pub[w][n] }
	hold := Hold{Node: "a", Gen: 4}
	if !MayMove(hold, []string{"b", "c", "d"}, declared) {
		t.Fatal("b and d cover gen 4: a quorum of three")
	}
	if MayMove(hold, []string{"b", "c"}, declared) {
		t.Fatal("c's declaration is for an earlier generation: one of two is no quorum")
	}
	if MayMove(hold, nil, declared) {
		t.Fatal("a hold without witnesses moved by this rule")
	}
	if MayMove(hold, []string{"a", "b", "d"}, declared) {
		t.Fatal("a holder listed as its own witness")
	}
}

func TestChoose(t *testing.T) {
	got := Choose("a", []string{"b", "a", "", "b", "c", "d"}, 2)
	if strings.Join(got, ",") != "b,c" {
		t.Fatalf("Choose = %v", got)
	}
}

func TestWitnessReplayDoesNotKeepANodeAlive(t *testing.T) {
	tm := DefaultTiming()
	w := NewWitness(tm, nil)
	t0 := time.Unix(0, 0)
	w.Probe("a", 2, 10, t0)
	w.Probe("a", 2, 10, t0.Add(tm.SilentAfter/2)) // the same probe again
	w.Probe("a", 2, 9, t0.Add(tm.SilentAfter/2))  // an older one
	if got := w.Tick(t0.Add(tm.SilentAfter)); len(got) != 1 {
		t.Fatalf("replayed probes kept a silent node alive: Tick = %v", got)
	}
}
