package main

import (
	"testing"
	"time"
)

func TestLongestOutage(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 21, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	seq := func(who ...string) []answer {
		var out []answer
		for i, w := range who {
			out = append(out, answer{at: at(i * 50), who: w})
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		answers   []answer
		from, end int
		want      time.Duration
		stillDown bool
		movers    int
	}{
		{"all answered", seq("a", "a", "a", "a"), 60, 200, 0, false, 1},
		{"one gap", seq("a", "a", "", "", "", "a", "a"), 60, 400, 200 * time.Millisecond, false, 1},
		{"the longest of two gaps", seq("a", "", "a", "", "", "", "b"), 0, 400, 200 * time.Millisecond, false, 2},
		{"down to the end", seq("a", "a", "", ""), 60, 1000, 950 * time.Millisecond, true, 0},
		{"a gap before the freeze does not count", seq("a", "", "", "", "a", "a"), 190, 300, 0, false, 1},
	} {
		got, down, _, _, who := longestOutage(tc.answers, at(tc.from), at(tc.end))
		if got != tc.want || down != tc.stillDown || len(who) != tc.movers {
			t.Errorf("%s: longestOutage = %s, stillDown %t, answerers %v; want %s, %t, %d answerers", tc.name, got, down, who, tc.want, tc.stillDown, tc.movers)
		}
	}
}

func TestValidAdvert(t *testing.T) {
	for _, tc := range []struct {
		version int
		advert  time.Duration
		ok      bool
	}{
		{2, time.Second, true}, {2, 3 * time.Second, true}, {2, 100 * time.Millisecond, false}, {2, 1500 * time.Millisecond, false},
		{3, 10 * time.Millisecond, true}, {3, 100 * time.Millisecond, true}, {3, 5 * time.Millisecond, false}, {3, 15 * time.Millisecond, false},
		{1, time.Second, false},
	} {
		if err := validAdvert(tc.version, tc.advert); (err == nil) != tc.ok {
			t.Errorf("validAdvert(%d, %s) = %v, want ok %t", tc.version, tc.advert, err, tc.ok)
		}
	}
}
