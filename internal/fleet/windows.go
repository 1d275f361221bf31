package fleet

import (
	"fmt"
	"sort"
	"time"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// Windows are a rollout's maintenance windows, resolved against the zone
// database of the host that judges them. Each agent judges on its own
// clock (issue 30): a node starts a switch only while a window is open;
// staging happens at any time; a window that closes while the node is
// switching or soaking lets it finish (the gate is at the start only).
//
// A window's opening and closing are wall-clock times in its zone, so
// they move with daylight saving time as the people who chose them
// expect: 01:00-04:00 lasts two hours on a spring-forward night and four
// on a fall-back night. A wall time a spring-forward gap skips is read as
// Go's time.Date reads it (02:30 in a one-hour gap is 03:30 after it);
// an occurrence that ends up empty is skipped, never stretched.
type Windows struct {
	ws []window
}

type window struct {
	days       [7]bool // by time.Weekday
	start, end int     // minutes after midnight; end <= start closes the next day
	loc        *time.Location
}

// CompileWindows resolves ws; none means any time. The errors carry the
// field path (spec.strategy.windows[1].timeZone: …).
func CompileWindows(ws []v1alpha1.Window) (Windows, error) {
	var out Windows
	for i, w := range ws {
		p := fmt.Sprintf("spec.strategy.windows[%d]", i)
		var c window
		for _, d := range w.Days {
			wd, ok := v1alpha1.GoWeekday(d)
			if !ok {
				return Windows{}, fmt.Errorf("%s.days: %q is not Mon … Sun", p, d)
			}
			c.days[wd] = true
		}
		var err error
		if c.start, err = v1alpha1.ParseClock(w.Start); err != nil {
			return Windows{}, fmt.Errorf("%s.start: %w", p, err)
		}
		if c.end, err = v1alpha1.ParseClock(w.End); err != nil {
			return Windows{}, fmt.Errorf("%s.end: %w", p, err)
		}
		if c.start == c.end {
			return Windows{}, fmt.Errorf("%s: start and end are both %s", p, w.Start)
		}
		if c.loc, err = v1alpha1.LoadTimeZone(w.TimeZone); err != nil {
			return Windows{}, fmt.Errorf("%s.timeZone: %w", p, err)
		}
		out.ws = append(out.ws, c)
	}
	return out, nil
}

// Any is whether there are no windows: switches may start at any time.
func (w Windows) Any() bool { return len(w.ws) == 0 }

// WindowState is the windows seen at one instant.
type WindowState struct {
	// Open: a switch may start now (always, without windows).
	Open bool
	// Closes is when the open window closes (zero without windows);
	// windows that overlap or touch count as one.
	Closes time.Time
	// NextOpen is when the next window opens, when none is open now.
	NextOpen time.Time
}

// Next is when the state changes next: the agent arms one timer for it
// (an opening produces no event from the API server to react to). Zero
// means never (no windows).
func (s WindowState) Next() time.Time {
	if s.Open {
		return s.Closes
	}
	return s.NextOpen
}

// String is how fleet status shows it.
func (s WindowState) String() string {
	switch {
	case s.Open && s.Closes.IsZero():
		return "any time (no windows)"
	case s.Open:
		return "open until " + s.Closes.UTC().Format(time.RFC3339)
	case s.NextOpen.IsZero():
		return "closed"
	default:
		return "closed; next opens " + s.NextOpen.UTC().Format(time.RFC3339)
	}
}

// interval is one occurrence of a window: [from, to).
type interval struct{ from, to time.Time }

// At is the state at now. Occurrences are enumerated from the day before
// now (an overnight window opened yesterday) to eight days after, in each
// window's zone: a weekly schedule repeats within that.
func (w Windows) At(now time.Time) WindowState {
	if w.Any() {
		return WindowState{Open: true}
	}
	var occ []interval
	for _, c := range w.ws {
		local := now.In(c.loc)
		for off := -1; off <= 8; off++ {
			day := time.Date(local.Year(), local.Month(), local.Day()+off, 12, 0, 0, 0, c.loc) // noon: never in a gap
			if !c.days[day.Weekday()] {
				continue
			}
			from := time.Date(day.Year(), day.Month(), day.Day(), c.start/60, c.start%60, 0, 0, c.loc)
			endDay := day.Day()
			if c.end <= c.start {
				endDay++
			}
			to := time.Date(day.Year(), day.Month(), endDay, c.end/60, c.end%60, 0, 0, c.loc)
			if to.After(from) {
				occ = append(occ, interval{from, to})
			}
		}
	}
	sort.Slice(occ, func(i, j int) bool { return occ[i].from.Before(occ[j].from) })
	var st WindowState
	for i := 0; i < len(occ); i++ {
		cur := occ[i]
		// Merge what overlaps or touches cur, so Closes is when a switch
		// could no longer start, not the end of one of several windows.
		for i+1 < len(occ) && !occ[i+1].from.After(cur.to) {
			i++
			if occ[i].to.After(cur.to) {
				cur.to = occ[i].to
			}
		}
		switch {
		case !now.Before(cur.from) && now.Before(cur.to):
			return WindowState{Open: true, Closes: cur.to}
		case cur.from.After(now) && st.NextOpen.IsZero():
			st.NextOpen = cur.from
		}
	}
	return st
}
