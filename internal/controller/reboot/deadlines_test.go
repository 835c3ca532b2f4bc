package reboot

import (
	"testing"
	"time"
)

// The wait until the next deadline counts from the end of the reconcile:
// a soak that ends 500 ms after the reconcile started, which took 300 ms,
// is looked at again 200 ms (and a few) later, not 500; one that ended
// during the reconcile at once; none nearer than the limit waits the limit.
func TestDeadlinesCountFromTheEndOfTheReconcile(t *testing.T) {
	start := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	end := start.Add(300 * time.Millisecond)
	for _, tc := range []struct {
		name string
		at   []time.Duration // deadlines, from start
		want time.Duration
	}{
		{"soak ends after the reconcile", []time.Duration{500 * time.Millisecond, 2 * time.Second}, 205 * time.Millisecond},
		{"soak ended during the reconcile", []time.Duration{100 * time.Millisecond}, 5 * time.Millisecond},
		{"nothing due", nil, maxRequeue},
		{"due after the limit", []time.Duration{time.Hour}, maxRequeue},
	} {
		d := newDeadlines(start)
		for _, a := range tc.at {
			d.at(start.Add(a))
		}
		if got := d.after(end, maxRequeue); got != tc.want {
			t.Errorf("%s: wait %s, want %s", tc.name, got, tc.want)
		}
	}
}
