package fleet

import (
	"fmt"
	"strings"
	"time"
)

// From is how start, status and debug name the applied release as the
// source of a config value: "rollout <name> generation <n>", the same
// words Overlay puts in its Sources.
func (a *AppliedRelease) From() string {
	if a == nil {
		return ""
	}
	return fmt.Sprintf("rollout %s generation %d", a.Rollout, a.Generation)
}

// Line is the record in one line, as status and debug show it: the
// rollout the node acts on, its phase and step, since when, why, and the
// slot it holds.
func (r Record) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rollout %s generation %d: %s", recordOrNone(r.Rollout), r.Generation, recordOrNone(string(r.Phase)))
	if r.Step != "" {
		fmt.Fprintf(&b, " at step %s", r.Step)
	}
	if !r.Since.IsZero() {
		fmt.Fprintf(&b, " since %s", r.Since.UTC().Format(time.RFC3339))
	}
	if r.Reason != "" {
		fmt.Fprintf(&b, " (%s)", r.Reason)
	}
	if r.Slot != "" {
		fmt.Fprintf(&b, "; holds slot %s", r.Slot)
	} else {
		b.WriteString("; holds no slot")
	}
	if r.Message != "" {
		fmt.Fprintf(&b, ": %s", r.Message)
	}
	return b.String()
}

func recordOrNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
