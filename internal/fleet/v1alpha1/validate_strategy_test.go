package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestValidateStrategyExtras(t *testing.T) {
	win := func(days []Weekday, start, end, tz string) []Window {
		return []Window{{Days: days, Start: start, End: end, TimeZone: tz}}
	}
	for _, tc := range []struct {
		name   string
		change func(r *FlexNodeRollout)
		want   string // the field path of the one error; "" for none
	}{
		{"plan", func(r *FlexNodeRollout) { r.Spec.Strategy.Mode = ModePlan }, ""},
		{"rollout", func(r *FlexNodeRollout) { r.Spec.Strategy.Mode = ModeRollout }, ""},
		{"unknown mode", func(r *FlexNodeRollout) { r.Spec.Strategy.Mode = "DryRun" }, "spec.strategy.mode"},
		{"onFailure Rollback", func(r *FlexNodeRollout) { r.Spec.Strategy.OnFailure = FailureRollback }, ""},
		{"canary 1", func(r *FlexNodeRollout) { c := intstr.FromInt32(1); r.Spec.Strategy.Canary = &c }, ""},
		{"canary 10%", func(r *FlexNodeRollout) { c := intstr.FromString("10%"); r.Spec.Strategy.Canary = &c }, ""},
		{"canary 0", func(r *FlexNodeRollout) { c := intstr.FromInt32(0); r.Spec.Strategy.Canary = &c }, "spec.strategy.canary"},
		{"canary 0%", func(r *FlexNodeRollout) { c := intstr.FromString("0%"); r.Spec.Strategy.Canary = &c }, "spec.strategy.canary"},
		{"canary words", func(r *FlexNodeRollout) { c := intstr.FromString("one"); r.Spec.Strategy.Canary = &c }, "spec.strategy.canary"},
		{"window", func(r *FlexNodeRollout) {
			r.Spec.Strategy.Windows = win([]Weekday{"Mon", "Tue"}, "22:00", "04:00", "Europe/Berlin")
		}, ""},
		{"window UTC by default", func(r *FlexNodeRollout) { r.Spec.Strategy.Windows = win([]Weekday{"Sun"}, "00:00", "23:59", "") }, ""},
		{"window no days", func(r *FlexNodeRollout) { r.Spec.Strategy.Windows = win(nil, "01:00", "02:00", "") }, "spec.strategy.windows[0].days"},
		{"window bad day", func(r *FlexNodeRollout) { r.Spec.Strategy.Windows = win([]Weekday{"Monday"}, "01:00", "02:00", "") }, "spec.strategy.windows[0].days[0]"},
		{"window twice a day", func(r *FlexNodeRollout) {
			r.Spec.Strategy.Windows = win([]Weekday{"Mon", "Mon"}, "01:00", "02:00", "")
		}, "spec.strategy.windows[0].days[1]"},
		{"window 24:00", func(r *FlexNodeRollout) { r.Spec.Strategy.Windows = win([]Weekday{"Mon"}, "01:00", "24:00", "") }, "spec.strategy.windows[0].end"},
		{"window 1:00", func(r *FlexNodeRollout) { r.Spec.Strategy.Windows = win([]Weekday{"Mon"}, "1:00", "02:00", "") }, "spec.strategy.windows[0].start"},
		{"window empty", func(r *FlexNodeRollout) { r.Spec.Strategy.Windows = win([]Weekday{"Mon"}, "02:00", "02:00", "") }, "spec.strategy.windows[0].end"},
		{"window unknown zone", func(r *FlexNodeRollout) {
			r.Spec.Strategy.Windows = win([]Weekday{"Mon"}, "01:00", "02:00", "Mars/Olympus_Mons")
		}, "spec.strategy.windows[0].timeZone"},
		{"window zone path", func(r *FlexNodeRollout) {
			r.Spec.Strategy.Windows = win([]Weekday{"Mon"}, "01:00", "02:00", "../../etc/passwd")
		}, "spec.strategy.windows[0].timeZone"},
		{"too many windows", func(r *FlexNodeRollout) {
			for range MaxWindows + 1 {
				r.Spec.Strategy.Windows = append(r.Spec.Strategy.Windows, win([]Weekday{"Mon"}, "01:00", "02:00", "")...)
			}
		}, "spec.strategy.windows"},
		{"rollback", func(r *FlexNodeRollout) { r.Spec.Rollback = &RollbackRequest{Reason: "pods crash on B"} }, ""},
		{"rollback without reason", func(r *FlexNodeRollout) { r.Spec.Rollback = &RollbackRequest{} }, "spec.rollback.reason"},
		{"rollback reason too long", func(r *FlexNodeRollout) {
			r.Spec.Rollback = &RollbackRequest{Reason: strings.Repeat("x", 1025)}
		}, "spec.rollback.reason"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := valid()
			tc.change(r)
			errs := Validate(r)
			switch {
			case tc.want == "" && len(errs) != 0:
				t.Fatalf("want no error, got %v", errs)
			case tc.want != "" && (len(errs) != 1 || errs[0].Field != tc.want):
				t.Fatalf("want one error at %s, got %v", tc.want, errs)
			}
		})
	}
}

func TestResolveCanary(t *testing.T) {
	for _, tc := range []struct {
		c        *intstr.IntOrString
		selected int
		want     int
	}{
		{nil, 10, 0},
		{ptr(intstr.FromInt32(1)), 10, 1},
		{ptr(intstr.FromInt32(5)), 3, 3}, // never more canaries than nodes
		{ptr(intstr.FromString("10%")), 200, 20},
		{ptr(intstr.FromString("10%")), 5, 1}, // rounded up, at least one
		{ptr(intstr.FromString("50%")), 0, 0},
	} {
		got, err := ResolveCanary(tc.c, tc.selected)
		if err != nil || got != tc.want {
			t.Errorf("ResolveCanary(%v, %d) = %d, %v; want %d", tc.c, tc.selected, got, err, tc.want)
		}
	}
}

func TestParseClock(t *testing.T) {
	for s, want := range map[string]int{"00:00": 0, "04:30": 270, "23:59": 1439} {
		if got, err := ParseClock(s); err != nil || got != want {
			t.Errorf("ParseClock(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"24:00", "7:00", "07:60", "07:00:00", ""} {
		if _, err := ParseClock(s); err == nil {
			t.Errorf("ParseClock(%q) accepted", s)
		}
	}
}
