package staticip

import (
	"testing"
	"time"
)

// The split time is the union of the episodes: overlapping kinds count
// once, gaps do not count, a single sample counts one interval.
func TestSplitTime(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 21, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name   string
		splits []Split
		want   time.Duration
	}{
		{"none", nil, 0},
		{"one sample", []Split{{Kind: "sending", From: at(100), To: at(100), Samples: 1}}, SampleInterval},
		{"one episode", []Split{{Kind: "configured", From: at(100), To: at(300), Samples: 21}}, 210 * time.Millisecond},
		{"both kinds at once count once", []Split{
			{Kind: "configured", From: at(100), To: at(300)},
			{Kind: "sending", From: at(110), To: at(400)},
		}, 310 * time.Millisecond},
		{"separate episodes add up", []Split{
			{Kind: "sending", From: at(1000), To: at(1000)},
			{Kind: "configured", From: at(100), To: at(190)},
		}, 110 * time.Millisecond},
		{"nested", []Split{
			{Kind: "configured", From: at(0), To: at(1000)},
			{Kind: "sending", From: at(500), To: at(600)},
		}, 1010 * time.Millisecond},
	} {
		if got := splitTime(tc.splits); got != tc.want {
			t.Errorf("%s: splitTime = %s, want %s", tc.name, got, tc.want)
		}
	}
}

// record merges consecutive samples of the same nodes into one episode and
// ignores a sample with one answer.
func TestRecordEpisodes(t *testing.T) {
	d := &SplitDetector{}
	t0 := time.Now()
	d.record("sending", []string{"node-1"}, t0)
	for i := range 5 {
		d.record("sending", []string{"node-2", "node-1"}, t0.Add(time.Duration(i)*SampleInterval))
	}
	d.record("sending", []string{"node-1", "node-2"}, t0.Add(time.Second))
	got := d.Splits()
	if len(got) != 2 || got[0].Samples != 5 || got[1].Samples != 1 {
		t.Fatalf("episodes = %v, want one of 5 samples and one of 1", got)
	}
	if got, want := d.SplitTime(), 6*SampleInterval; got != want {
		t.Errorf("SplitTime = %s, want %s", got, want)
	}
}

// Past maxEpisodes the splits are counted, not listed, and each still
// counts one sample of split time.
func TestRecordBeyondMaxEpisodes(t *testing.T) {
	d := &SplitDetector{}
	t0 := time.Now()
	for i := range maxEpisodes + 10 {
		d.record("sending", []string{"node-1", "node-2"}, t0.Add(time.Duration(i)*time.Second))
	}
	if got := len(d.Splits()); got != maxEpisodes {
		t.Errorf("listed %d splits, want %d", got, maxEpisodes)
	}
	if got := d.Episodes(); got != maxEpisodes+10 {
		t.Errorf("Episodes = %d, want %d", got, maxEpisodes+10)
	}
	if got, want := d.SplitTime(), time.Duration(maxEpisodes+10)*SampleInterval; got != want {
		t.Errorf("SplitTime = %s, want %s", got, want)
	}
}
