package reboot

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// A node whose drains keep timing out waits twice as long after each, from
// the first backoff up to 32 times it and never more than maxBackoff; the
// waits of one node do not move another's, and a verified reboot starts
// the node over. However long a node waited, its next timeout doubles the
// wait again (a long wait is no sign the drain will go better).
func TestDrainBackoff(t *testing.T) {
	for _, tc := range []struct {
		first time.Duration
		want  []time.Duration
	}{
		{0, []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute}},
		{3 * time.Second, []time.Duration{3 * time.Second, 6 * time.Second, 12 * time.Second, 24 * time.Second, 48 * time.Second, 96 * time.Second, 96 * time.Second}},
	} {
		d := newDrainer(nil, tc.first, func() {})
		clock := testingclock.NewFakeClock(time.Now())
		d.timeouts.Clock = clock
		for i, want := range tc.want {
			if got := d.backoff("a"); got != want {
				t.Fatalf("first %s: timeout %d of node a waits %s, want %s", tc.first, i+1, got, want)
			}
		}
		if got := d.backoff("b"); got != tc.want[0] {
			t.Fatalf("first %s: node b's first timeout waits %s, want %s (its own count)", tc.first, got, tc.want[0])
		}
		// Entries expire after twice the cap by default; ours must not.
		clock.Step(24 * time.Hour)
		if got := d.backoff("a"); got != tc.want[len(tc.want)-1] {
			t.Fatalf("first %s: a timeout a day later waits %s, want %s", tc.first, got, tc.want[len(tc.want)-1])
		}
		d.reset("a")
		if got := d.backoff("a"); got != tc.want[0] {
			t.Fatalf("first %s: after a verified reboot the wait is %s, want %s", tc.first, got, tc.want[0])
		}
	}
}
