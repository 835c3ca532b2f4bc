package rebootplan

import (
	"strings"
	"testing"
	"time"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

func mustLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustWindow(t testing.TB, start, end, tz string, days ...rebootv1.Weekday) Window {
	t.Helper()
	w, err := ParseWindow(rebootv1.MaintenanceWindow{Start: start, End: end, TimeZone: tz, Days: days})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestParseWindowErrors(t *testing.T) {
	tests := map[string]struct {
		w    rebootv1.MaintenanceWindow
		want string
	}{
		"unknown zone":  {rebootv1.MaintenanceWindow{Start: "01:00", End: "02:00", TimeZone: "Europe/Osloo"}, `unknown time zone "Europe/Osloo"`},
		"Local":         {rebootv1.MaintenanceWindow{Start: "01:00", End: "02:00", TimeZone: "Local"}, `unknown time zone "Local"`},
		"bad start":     {rebootv1.MaintenanceWindow{Start: "1:00", End: "02:00"}, `window start "1:00" is not a time`},
		"start 24:00":   {rebootv1.MaintenanceWindow{Start: "24:00", End: "02:00"}, `window start "24:00" is not a time`},
		"end 24:30":     {rebootv1.MaintenanceWindow{Start: "01:00", End: "24:30"}, `window end "24:30" is not a time`},
		"minute 60":     {rebootv1.MaintenanceWindow{Start: "01:60", End: "02:00"}, `window start "01:60" is not a time`},
		"empty":         {rebootv1.MaintenanceWindow{Start: "03:00", End: "03:00"}, `window start and end are both 03:00`},
		"bad day":       {rebootv1.MaintenanceWindow{Start: "01:00", End: "02:00", Days: []rebootv1.Weekday{"Sun"}}, `unknown day "Sun"`},
		"whole day ok?": {rebootv1.MaintenanceWindow{Start: "00:00", End: "24:00"}, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseWindow(tc.w)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("ParseWindow() = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := ParseWindows([]rebootv1.MaintenanceWindow{{Start: "01:00", End: "02:00"}, {Start: "x", End: "02:00"}}); err == nil || !strings.HasPrefix(err.Error(), "spec.windows[1]: ") {
		t.Errorf("ParseWindows() = %v, want an error naming spec.windows[1]", err)
	}
}

func TestWindowInAndNext(t *testing.T) {
	oslo := mustLoad(t, "Europe/Oslo")
	ny := mustLoad(t, "America/New_York")
	at := func(loc *time.Location, y int, m time.Month, d, h, mi int) time.Time {
		return time.Date(y, m, d, h, mi, 0, 0, loc)
	}
	utc := func(s string) time.Time {
		tt, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tt
	}
	tests := map[string]struct {
		w    Window
		now  time.Time
		in   bool
		next time.Time
	}{
		"inside": {
			w: mustWindow(t, "02:00", "04:00", "UTC"), now: utc("2026-05-05T03:00:00Z"), in: true, next: utc("2026-05-05T03:00:00Z"),
		},
		"end is exclusive": {
			w: mustWindow(t, "02:00", "04:00", "UTC"), now: utc("2026-05-05T04:00:00Z"), next: utc("2026-05-06T02:00:00Z"),
		},
		"later today": {
			w: mustWindow(t, "02:00", "04:00", "UTC"), now: utc("2026-05-05T01:00:00Z"), next: utc("2026-05-05T02:00:00Z"),
		},
		"only weekends": { // 2026-05-06 is a Wednesday
			w: mustWindow(t, "02:00", "04:00", "UTC", "Saturday", "Sunday"), now: utc("2026-05-06T03:00:00Z"), next: utc("2026-05-09T02:00:00Z"),
		},
		"across midnight, after midnight": { // opened Friday 22:00, Saturday 01:00
			w: mustWindow(t, "22:00", "02:00", "UTC", "Friday"), now: utc("2026-05-09T01:00:00Z"), in: true, next: utc("2026-05-09T01:00:00Z"),
		},
		"across midnight, next day not listed": {
			w: mustWindow(t, "22:00", "02:00", "UTC", "Friday"), now: utc("2026-05-09T23:00:00Z"), next: utc("2026-05-15T22:00:00Z"),
		},
		"end 24:00": {
			w: mustWindow(t, "20:00", "24:00", "UTC"), now: utc("2026-05-05T23:59:00Z"), in: true, next: utc("2026-05-05T23:59:00Z"),
		},
		"in the group's zone": { // 02:00 in Oslo in summer is 00:00 UTC
			w: mustWindow(t, "02:00", "04:00", "Europe/Oslo"), now: utc("2026-05-04T23:00:00Z"), next: utc("2026-05-05T00:00:00Z"),
		},
		"oslo spring forward: window starting in the skipped hour opens at the jump": {
			// 2026-03-29 02:00 CET jumps to 03:00 CEST (01:00 UTC).
			w: mustWindow(t, "02:30", "04:00", "Europe/Oslo"), now: at(oslo, 2026, 3, 29, 1, 0), next: utc("2026-03-29T01:00:00Z"),
		},
		"oslo spring forward: after a window shortened by the jump, the next day": {
			w: mustWindow(t, "01:00", "04:00", "Europe/Oslo"), now: utc("2026-03-29T02:00:00Z"), next: utc("2026-03-29T23:00:00Z"),
		},
		"oslo spring forward: the day after uses summer time": {
			w: mustWindow(t, "02:30", "04:00", "Europe/Oslo"), now: utc("2026-03-29T03:00:00Z"), next: utc("2026-03-30T00:30:00Z"),
		},
		"oslo fall back: the repeated hour reopens the window": {
			// 2026-10-25 03:00 CEST goes back to 02:00 CET (01:00 UTC);
			// 02:00-02:30 happens twice: 00:00Z and 01:00Z.
			w: mustWindow(t, "02:00", "02:30", "Europe/Oslo"), now: utc("2026-10-25T00:40:00Z"), next: utc("2026-10-25T01:00:00Z"),
		},
		"oslo fall back: first occurrence": {
			w: mustWindow(t, "02:15", "02:45", "Europe/Oslo"), now: utc("2026-10-24T23:00:00Z"), next: utc("2026-10-25T00:15:00Z"),
		},
		"oslo fall back: second occurrence of start": {
			w: mustWindow(t, "02:15", "02:45", "Europe/Oslo"), now: utc("2026-10-25T00:50:00Z"), next: utc("2026-10-25T01:15:00Z"),
		},
		"new york spring forward": {
			// 2026-03-08 02:00 EST jumps to 03:00 EDT (07:00 UTC).
			w: mustWindow(t, "02:00", "03:00", "America/New_York", "Sunday"), now: at(ny, 2026, 3, 7, 12, 0), next: utc("2026-03-15T06:00:00Z"),
		},
		"new york spring forward, window to 03:30": {
			w: mustWindow(t, "02:00", "03:30", "America/New_York", "Sunday"), now: at(ny, 2026, 3, 7, 12, 0), next: utc("2026-03-08T07:00:00Z"),
		},
		"new york fall back": {
			// 2026-11-01 02:00 EDT goes back to 01:00 EST (06:00 UTC).
			w: mustWindow(t, "01:30", "01:45", "America/New_York", "Sunday"), now: utc("2026-11-01T05:50:00Z"), next: utc("2026-11-01T06:30:00Z"),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.w.InWindow(tc.now); got != tc.in {
				t.Errorf("InWindow(%s) = %t, want %t", tc.now.UTC().Format(time.RFC3339), got, tc.in)
			}
			if got := tc.w.NextWindowStart(tc.now); !got.Equal(tc.next) {
				t.Errorf("NextWindowStart(%s) = %s, want %s", tc.now.UTC().Format(time.RFC3339), got.UTC().Format(time.RFC3339), tc.next.UTC().Format(time.RFC3339))
			}
		})
	}
}

// TestNextWindowStartBruteForce checks NextWindowStart against a minute by
// minute walk over DST transitions in zones with and without DST.
func TestNextWindowStartBruteForce(t *testing.T) {
	windows := []Window{
		mustWindow(t, "02:30", "03:15", "Europe/Oslo"),
		mustWindow(t, "02:00", "02:30", "Europe/Oslo", "Sunday"),
		mustWindow(t, "23:30", "02:10", "Europe/Oslo", "Saturday"),
		mustWindow(t, "01:30", "02:30", "America/New_York", "Sunday", "Monday"),
		mustWindow(t, "00:00", "24:00", "America/New_York", "Sunday"),
		mustWindow(t, "12:00", "12:01", "Asia/Kolkata", "Wednesday"),
	}
	starts := []time.Time{
		time.Date(2026, 3, 28, 20, 0, 0, 0, time.UTC),
		time.Date(2026, 10, 24, 21, 7, 0, 0, time.UTC),
		time.Date(2026, 3, 7, 22, 0, 0, 0, time.UTC),
		time.Date(2026, 10, 31, 23, 45, 0, 0, time.UTC),
	}
	for wi, w := range windows {
		for _, s := range starts {
			for step := range 48 { // every 37 minutes over a day and a bit
				now := s.Add(time.Duration(step*37) * time.Minute)
				want := now
				for !w.InWindow(want) {
					want = want.Add(time.Minute)
					if want.Sub(now) > 8*24*time.Hour {
						t.Fatalf("window %d never opens after %s", wi, now)
					}
				}
				if got := w.NextWindowStart(now); !got.Equal(want) {
					t.Errorf("window %d: NextWindowStart(%s) = %s, want %s", wi, now.UTC().Format(time.RFC3339), got.UTC().Format(time.RFC3339), want.UTC().Format(time.RFC3339))
				}
			}
		}
	}
}

func TestWindowsUnion(t *testing.T) {
	now := time.Date(2026, 5, 5, 3, 0, 0, 0, time.UTC)
	if !Windows(nil).InWindow(now) || !Windows(nil).NextWindowStart(now).Equal(now) {
		t.Error("no windows must mean always open")
	}
	ws := Windows{mustWindow(t, "10:00", "11:00", "UTC"), mustWindow(t, "05:00", "06:00", "UTC")}
	if ws.InWindow(now) {
		t.Error("InWindow at 03:00 = true")
	}
	if got, want := ws.NextWindowStart(now), time.Date(2026, 5, 5, 5, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("NextWindowStart = %s, want %s", got, want)
	}
}
