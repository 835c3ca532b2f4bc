package witness

import (
	"errors"
	"fmt"
	"time"
)

// Timing is the protocol's clock. Every duration is measured by one process
// on its own monotonic clock; nothing compares readings across nodes.
type Timing struct {
	// ProbeInterval is how often a holder probes each witness.
	ProbeInterval time.Duration
	// HoldFor is how long after sending a probe that a quorum vouched for
	// the holder may answer for the address.
	HoldFor time.Duration
	// SilentAfter is how long a witness waits without hearing a node's
	// generation before it declares it silent.
	SilentAfter time.Duration
	// FenceSlack is how long after its hold ends a node may still answer:
	// the agent's timer, removing the address, and for an agent that is
	// frozen or killed, the kernel's own expiry of what it programmed.
	FenceSlack time.Duration
	// Drift bounds the rate error of any node's clock (1e-4 = 100 ppm).
	Drift float64
}

// DefaultTiming fails over in well under a second: the witnesses declare
// a dead holder silent after 600 ms, and a stalled API server costs
// nothing while the holder can hear its witnesses.
func DefaultTiming() Timing {
	return Timing{
		ProbeInterval: 50 * time.Millisecond,
		HoldFor:       300 * time.Millisecond,
		SilentAfter:   600 * time.Millisecond,
		FenceSlack:    100 * time.Millisecond,
		Drift:         1e-3,
	}
}

// Validate checks the timing inequality that keeps two nodes from
// answering (see the package documentation):
//
//	HoldFor·(1+Drift) + FenceSlack·(1+Drift) < SilentAfter·(1−Drift)
//
// and that a holder probes several times within HoldFor, so that one lost
// probe does not end a hold.
func (t Timing) Validate() error {
	var errs []error
	if t.ProbeInterval <= 0 || t.HoldFor <= 0 || t.SilentAfter <= 0 || t.FenceSlack < 0 {
		errs = append(errs, fmt.Errorf("probe interval (%s), hold (%s) and silent-after (%s) must be positive and fence slack (%s) not negative",
			t.ProbeInterval, t.HoldFor, t.SilentAfter, t.FenceSlack))
	}
	if t.Drift < 0 || t.Drift >= 0.1 {
		errs = append(errs, fmt.Errorf("clock drift %g must be in [0, 0.1)", t.Drift))
	}
	if 2*t.ProbeInterval > t.HoldFor {
		errs = append(errs, fmt.Errorf("probe interval %s must be at most half the hold %s, or one lost probe ends the hold", t.ProbeInterval, t.HoldFor))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if !t.Safe() {
		return fmt.Errorf("silent-after %s is too short: it must exceed hold %s plus fence slack %s, each stretched by clock drift %g",
			t.SilentAfter, t.HoldFor, t.FenceSlack, t.Drift)
	}
	return nil
}

// Safe reports whether the timing inequality holds (Validate without the
// liveness checks; the model test uses it to pick timings on both sides).
func (t Timing) Safe() bool {
	fast, slow := 1+t.Drift, 1-t.Drift
	return float64(t.HoldFor+t.FenceSlack)*fast < float64(t.SilentAfter)*slow
}
