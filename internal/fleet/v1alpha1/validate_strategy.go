package v1alpha1

import (
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The rules of issue 30's fields, the same as their schema markers in
// types_strategy.go.

var (
	clockRE    = lazyRE(`^([01][0-9]|2[0-3]):[0-5][0-9]$`)
	timeZoneRE = lazyRE(`^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$`)
)

// weekdays maps the API's day names to Go's.
var weekdays = map[Weekday]time.Weekday{
	"Sun": time.Sunday, "Mon": time.Monday, "Tue": time.Tuesday, "Wed": time.Wednesday,
	"Thu": time.Thursday, "Fri": time.Friday, "Sat": time.Saturday,
}

// GoWeekday is d as a time.Weekday; ok is false for a name the API does
// not have.
func GoWeekday(d Weekday) (time.Weekday, bool) {
	w, ok := weekdays[d]
	return w, ok
}

// ParseClock is "HH:MM" as minutes after midnight.
func ParseClock(s string) (int, error) {
	if !clockRE().MatchString(s) {
		return 0, fmt.Errorf("want HH:MM (24-hour, 00:00-23:59), not %q", s)
	}
	h, _ := strconv.Atoi(s[:2]) // the pattern made them digits
	m, _ := strconv.Atoi(s[3:])
	return h*60 + m, nil
}

// LoadTimeZone is the window's zone; empty means UTC. The name must be
// in the zone database of the process that asks (each node reads its
// own, /usr/share/zoneinfo on the host): a name it lacks is an error
// naming the zone, never a silent UTC.
func LoadTimeZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if len(name) > 64 || !timeZoneRE().MatchString(name) {
		return nil, fmt.Errorf("want an IANA time zone name such as Europe/Berlin, not %q", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("time zone %q is not in this host's zone database: %w", name, err)
	}
	return loc, nil
}

func validateStrategyExtras(s *StrategyExtras, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch s.Mode {
	case "", ModePlan, ModeRollout:
	default:
		errs = append(errs, field.NotSupported(p.Child("mode"), s.Mode, []RolloutMode{ModePlan, ModeRollout}))
	}
	if c := s.Canary; c != nil {
		if _, err := ResolveCanary(c, 1); err != nil {
			errs = append(errs, field.Invalid(p.Child("canary"), c.String(), err.Error()))
		}
	}
	if len(s.Windows) > MaxWindows {
		errs = append(errs, field.TooMany(p.Child("windows"), len(s.Windows), MaxWindows))
	}
	for i := range s.Windows {
		errs = append(errs, validateWindow(&s.Windows[i], p.Child("windows").Index(i))...)
	}
	return errs
}

func validateWindow(w *Window, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(w.Days) == 0 {
		errs = append(errs, field.Required(p.Child("days"), "name the days the window opens on (Mon … Sun)"))
	}
	seen := map[Weekday]bool{}
	for i, d := range w.Days {
		if _, ok := GoWeekday(d); !ok {
			errs = append(errs, field.NotSupported(p.Child("days").Index(i), d, []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}))
		} else if seen[d] {
			errs = append(errs, field.Duplicate(p.Child("days").Index(i), d))
		}
		seen[d] = true
	}
	start, serr := ParseClock(w.Start)
	if serr != nil {
		errs = append(errs, field.Invalid(p.Child("start"), w.Start, serr.Error()))
	}
	end, eerr := ParseClock(w.End)
	if eerr != nil {
		errs = append(errs, field.Invalid(p.Child("end"), w.End, eerr.Error()))
	}
	if serr == nil && eerr == nil && start == end {
		errs = append(errs, field.Invalid(p.Child("end"), w.End, "must differ from start (a window of no time, or of a whole day, is ambiguous: list the days instead)"))
	}
	if _, err := LoadTimeZone(w.TimeZone); err != nil {
		errs = append(errs, field.Invalid(p.Child("timeZone"), w.TimeZone, err.Error()))
	}
	return errs
}

func validateRollback(r *RollbackRequest, p *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	switch {
	case r.Reason == "":
		errs = append(errs, field.Required(p.Child("reason"), "say why (fleet rollback NAME --reason TEXT)"))
	case len(r.Reason) > 1024:
		errs = append(errs, field.TooLong(p.Child("reason"), "", 1024))
	}
	if len(r.RequestedBy) > 256 {
		errs = append(errs, field.TooLong(p.Child("requestedBy"), "", 256))
	}
	return errs
}

// ResolveCanary is the number of canary nodes among selected: a count as
// it is (at most selected), a percentage of selected rounded up (at
// least one); nil means no canary wave (0).
func ResolveCanary(c *intstr.IntOrString, selected int) (int, error) {
	if c == nil {
		return 0, nil
	}
	n, err := ResolveMaxUnavailable(c, selected) // the same count-or-percentage rule
	if err != nil {
		return 0, err
	}
	return min(n, max(selected, 0)), nil
}
