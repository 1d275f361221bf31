package fleet

import (
	"strings"
	"testing"
	"time"
	// The tests' zone database, so they do not depend on the build
	// machine's; the binary reads the host's (see v1alpha1.LoadTimeZone).
	_ "time/tzdata"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

func mustWindows(t *testing.T, ws ...v1alpha1.Window) Windows {
	t.Helper()
	w, err := CompileWindows(ws)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func weekdays() []v1alpha1.Weekday { return []v1alpha1.Weekday{"Mon", "Tue", "Wed", "Thu", "Fri"} }

func TestWindowsNoneIsAnyTime(t *testing.T) {
	st := mustWindows(t).At(utc("2026-12-06T03:00:00Z"))
	if !st.Open || !st.Next().IsZero() {
		t.Fatalf("no windows: %+v, want open with no change ahead", st)
	}
}

// TestWindowsOvernight: 22:00-04:00 on weekdays, UTC. 2026-12-07 is a
// Monday.
func TestWindowsOvernight(t *testing.T) {
	w := mustWindows(t, v1alpha1.Window{Days: weekdays(), Start: "22:00", End: "04:00"})
	for _, tc := range []struct {
		now          string
		open         bool
		closes, next string
	}{
		{"2026-12-07T21:59:59Z", false, "", "2026-12-07T22:00:00Z"},
		{"2026-12-07T22:00:00Z", true, "2026-12-08T04:00:00Z", ""},
		{"2026-12-08T03:59:59Z", true, "2026-12-08T04:00:00Z", ""},
		{"2026-12-08T04:00:00Z", false, "", "2026-12-08T22:00:00Z"},
		{"2026-12-12T02:00:00Z", true, "2026-12-12T04:00:00Z", ""},  // Friday's window runs into Saturday
		{"2026-12-12T10:00:00Z", false, "", "2026-12-14T22:00:00Z"}, // Saturday: the next is Monday night
		{"2026-12-07T01:00:00Z", false, "", "2026-12-07T22:00:00Z"}, // Monday early: Sunday has no window
	} {
		st := w.At(utc(tc.now))
		if st.Open != tc.open || (tc.closes != "" && !st.Closes.Equal(utc(tc.closes))) || (tc.next != "" && !st.NextOpen.Equal(utc(tc.next))) {
			t.Errorf("At(%s) = %s, want open=%v closes=%s next=%s", tc.now, st, tc.open, tc.closes, tc.next)
		}
	}
}

// TestWindowsTimeZoneAndDST: a Sunday 01:00-04:00 window in Berlin is
// two hours long the night clocks spring forward (2026-03-29) and four
// the night they fall back (2026-10-25), and opens at 01:00 local in
// winter (00:00Z) and summer (23:00Z the day before).
func TestWindowsTimeZoneAndDST(t *testing.T) {
	w := mustWindows(t, v1alpha1.Window{Days: []v1alpha1.Weekday{"Sun"}, Start: "01:00", End: "04:00", TimeZone: "Europe/Berlin"})
	for _, tc := range []struct {
		before   string // a time before the window
		from, to string
	}{
		{"2026-03-28T12:00:00Z", "2026-03-29T00:00:00Z", "2026-03-29T02:00:00Z"}, // CET 01:00 to CEST 04:00: 2h
		{"2026-10-24T12:00:00Z", "2026-10-24T23:00:00Z", "2026-10-25T03:00:00Z"}, // CEST 01:00 to CET 04:00: 4h
		{"2026-12-05T12:00:00Z", "2026-12-06T00:00:00Z", "2026-12-06T03:00:00Z"}, // winter: 3h
		{"2026-07-04T12:00:00Z", "2026-07-04T23:00:00Z", "2026-07-05T02:00:00Z"}, // summer: 3h
	} {
		st := w.At(utc(tc.before))
		if st.Open || !st.NextOpen.Equal(utc(tc.from)) {
			t.Errorf("At(%s) = %s, want next open %s", tc.before, st, tc.from)
			continue
		}
		in := w.At(st.NextOpen)
		if !in.Open || !in.Closes.Equal(utc(tc.to)) {
			t.Errorf("At(%s) = %s, want open until %s", st.NextOpen.Format(time.RFC3339), in, tc.to)
		}
	}
	// A window inside the spring-forward gap (02:15-02:45 does not exist
	// on 2026-03-29 in Berlin) is read as Go reads the wall times:
	// 03:15-03:45 CEST, half an hour, not skipped and not stretched.
	gap := mustWindows(t, v1alpha1.Window{Days: []v1alpha1.Weekday{"Sun"}, Start: "02:15", End: "02:45", TimeZone: "Europe/Berlin"})
	st := gap.At(utc("2026-03-29T01:20:00Z"))
	if !st.Open || !st.Closes.Equal(utc("2026-03-29T01:45:00Z")) {
		t.Errorf("in the gap: %s, want open until 01:45Z", st)
	}
	// The same window in New York (other rules, other dates).
	ny := mustWindows(t, v1alpha1.Window{Days: []v1alpha1.Weekday{"Mon"}, Start: "09:00", End: "10:00", TimeZone: "America/New_York"})
	if st := ny.At(utc("2026-12-07T14:30:00Z")); !st.Open || !st.Closes.Equal(utc("2026-12-07T15:00:00Z")) {
		t.Errorf("New York, EST: %s", st)
	}
	if st := ny.At(utc("2026-07-06T13:30:00Z")); !st.Open || !st.Closes.Equal(utc("2026-07-06T14:00:00Z")) {
		t.Errorf("New York, EDT: %s", st)
	}
}

func TestWindowsOverlapMerge(t *testing.T) {
	w := mustWindows(t,
		v1alpha1.Window{Days: []v1alpha1.Weekday{"Mon"}, Start: "01:00", End: "03:00"},
		v1alpha1.Window{Days: []v1alpha1.Weekday{"Mon"}, Start: "02:30", End: "05:00", TimeZone: "UTC"},
		v1alpha1.Window{Days: []v1alpha1.Weekday{"Mon"}, Start: "05:00", End: "06:00"}, // touches: one window
	)
	st := w.At(utc("2026-12-07T01:30:00Z"))
	if !st.Open || !st.Closes.Equal(utc("2026-12-07T06:00:00Z")) {
		t.Fatalf("%s, want open until 06:00Z", st)
	}
}

// TestWindowsInvariants walks a year hour by hour through both DST
// changes of three zones: whenever closed, the next opening is ahead and
// open, and the instant before it closed; whenever open, the closing is
// ahead and closed.
func TestWindowsInvariants(t *testing.T) {
	w := mustWindows(t,
		v1alpha1.Window{Days: []v1alpha1.Weekday{"Sat", "Sun"}, Start: "23:30", End: "02:30", TimeZone: "Europe/Berlin"},
		v1alpha1.Window{Days: []v1alpha1.Weekday{"Wed"}, Start: "01:30", End: "02:30", TimeZone: "America/New_York"},
		v1alpha1.Window{Days: []v1alpha1.Weekday{"Fri"}, Start: "12:00", End: "12:15", TimeZone: "Australia/Lord_Howe"}, // a 30-minute DST shift
	)
	for now := utc("2026-01-01T00:07:00Z"); now.Before(utc("2027-01-01T00:00:00Z")); now = now.Add(time.Hour) {
		st := w.At(now)
		switch {
		case st.Open && (!st.Closes.After(now) || w.At(st.Closes).Open):
			t.Fatalf("At(%s) = %s: the closing is not ahead, or not closed", now, st)
		case !st.Open && (!st.NextOpen.After(now) || st.NextOpen.Sub(now) > 8*24*time.Hour):
			t.Fatalf("At(%s) = %s: no opening within a week", now, st)
		case !st.Open && (!w.At(st.NextOpen).Open || w.At(st.NextOpen.Add(-time.Second)).Open):
			t.Fatalf("At(%s) = %s: not an opening", now, st)
		}
	}
}

func TestCompileWindowsErrorsNameTheField(t *testing.T) {
	_, err := CompileWindows([]v1alpha1.Window{
		{Days: []v1alpha1.Weekday{"Mon"}, Start: "01:00", End: "02:00"},
		{Days: []v1alpha1.Weekday{"Mon"}, Start: "01:00", End: "02:00", TimeZone: "Mars/Olympus_Mons"},
	})
	if err == nil || !strings.HasPrefix(err.Error(), "spec.strategy.windows[1].timeZone: time zone \"Mars/Olympus_Mons\"") {
		t.Fatalf("err = %v", err)
	}
}
