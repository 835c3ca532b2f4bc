package rebootplan

import (
	"fmt"
	"strconv"
	"time"

	// Windows must work on images without a time zone database.
	_ "time/tzdata"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// Window is a parsed maintenance window: open whenever the local wall clock
// of its zone shows a time in [start, end) on one of its days, or, for a
// window that runs past midnight, until end on the following day.
type Window struct {
	days       [7]bool // indexed by time.Weekday
	start, end int     // minutes since local midnight; end may be 1440
	loc        *time.Location
}

// ParseWindow checks a MaintenanceWindow and loads its time zone. The error
// names the problem in the words of the API, e.g. an unknown time zone,
// which the API server cannot check.
func ParseWindow(w rebootv1.MaintenanceWindow) (Window, error) {
	var out Window
	var err error
	if out.start, err = parseClock(w.Start); err != nil || out.start == 24*60 {
		return out, fmt.Errorf("window start %q is not a time between 00:00 and 23:59", w.Start)
	}
	if out.end, err = parseClock(w.End); err != nil || out.end == 0 && w.End != "00:00" {
		return out, fmt.Errorf("window end %q is not a time between 00:00 and 24:00", w.End)
	}
	if out.start == out.end {
		return out, fmt.Errorf("window start and end are both %s", w.Start)
	}
	tz := w.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	if tz == "Local" {
		return out, fmt.Errorf("unknown time zone %q", tz)
	}
	if out.loc, err = time.LoadLocation(tz); err != nil {
		return out, fmt.Errorf("unknown time zone %q", tz)
	}
	if len(w.Days) == 0 {
		out.days = [7]bool{true, true, true, true, true, true, true}
	}
	for _, d := range w.Days {
		wd, ok := weekdays[d]
		if !ok {
			return out, fmt.Errorf("unknown day %q", d)
		}
		out.days[wd] = true
	}
	return out, nil
}

var weekdays = map[rebootv1.Weekday]time.Weekday{
	"Sunday": time.Sunday, "Monday": time.Monday, "Tuesday": time.Tuesday, "Wednesday": time.Wednesday,
	"Thursday": time.Thursday, "Friday": time.Friday, "Saturday": time.Saturday,
}

func parseClock(s string) (int, error) {
	if len(s) != 5 || s[2] != ':' {
		return 0, fmt.Errorf("not HH:MM")
	}
	h, err1 := strconv.Atoi(s[:2])
	m, err2 := strconv.Atoi(s[3:])
	if err1 != nil || err2 != nil || h < 0 || m < 0 || m > 59 || h > 24 || h == 24 && m != 0 {
		return 0, fmt.Errorf("not HH:MM")
	}
	return h*60 + m, nil
}

// InWindow says whether the window is open at t.
func (w Window) InWindow(t time.Time) bool {
	l := t.In(w.loc)
	tod := l.Hour()*60 + l.Minute()
	today, yesterday := l.Weekday(), (l.Weekday()+6)%7
	if w.start < w.end {
		return w.days[today] && tod >= w.start && tod < w.end
	}
	return w.days[today] && tod >= w.start || w.days[yesterday] && tod < w.end
}

// NextWindowStart returns the first instant at or after t at which the window
// is open (t itself when it is open at t). The window opens at least once a
// week, so the result is always within eight days of t.
func (w Window) NextWindowStart(t time.Time) time.Time {
	if w.InWindow(t) {
		return t
	}
	// The window can only open where the local wall clock reaches start:
	// at the instant(s) it shows start (two on the day clocks go back), or
	// at a zone transition that makes it jump over or back past start.
	var best time.Time
	consider := func(c time.Time) {
		if c.Before(t) || !best.IsZero() && !c.Before(best) || !w.InWindow(c) {
			return
		}
		best = c
	}
	l := t.In(w.loc)
	for d := -1; d <= 8; d++ {
		day := time.Date(l.Year(), l.Month(), l.Day()+d, 0, 0, 0, 0, w.loc)
		y, m, dd := day.Date()
		at := time.Date(y, m, dd, w.start/60, w.start%60, 0, 0, w.loc)
		// time.Date picks one offset; try the offsets in effect around the
		// day too, to find both instants of a repeated wall time.
		for _, probe := range []time.Time{at.Add(-3 * time.Hour), at, at.Add(3 * time.Hour)} {
			_, off := probe.Zone()
			c := time.Date(y, m, dd, w.start/60, w.start%60, 0, 0, time.UTC).Add(-time.Duration(off) * time.Second)
			if cl := c.In(w.loc); cl.Hour() == w.start/60 && cl.Minute() == w.start%60 {
				consider(c)
			}
		}
	}
	for c := t.In(w.loc); c.Before(t.Add(9 * 24 * time.Hour)); {
		_, end := c.ZoneBounds()
		if end.IsZero() {
			break
		}
		consider(end)
		c = end
	}
	return best
}

// Windows is a group's set of maintenance windows; reboots may start while
// any of them is open. No windows means always open.
type Windows []Window

// ParseWindows parses every window of a group.
func ParseWindows(ws []rebootv1.MaintenanceWindow) (Windows, error) {
	out := make(Windows, 0, len(ws))
	for i, w := range ws {
		p, err := ParseWindow(w)
		if err != nil {
			return nil, fmt.Errorf("spec.windows[%d]: %w", i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// InWindow says whether reboots may start at t.
func (ws Windows) InWindow(t time.Time) bool {
	if len(ws) == 0 {
		return true
	}
	for _, w := range ws {
		if w.InWindow(t) {
			return true
		}
	}
	return false
}

// NextWindowStart returns the first instant at or after t at which a window
// is open.
func (ws Windows) NextWindowStart(t time.Time) time.Time {
	if len(ws) == 0 {
		return t
	}
	var best time.Time
	for _, w := range ws {
		if c := w.NextWindowStart(t); best.IsZero() || c.Before(best) {
			best = c
		}
	}
	return best
}
