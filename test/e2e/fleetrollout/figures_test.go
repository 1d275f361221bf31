package fleetrollout

import (
	"sort"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/fleet"
)

// logFigures logs the rollout's figures from the watch's history: apply
// to Complete, and per node the time to Staged (fetch and verify while
// serving), the wait for a slot, the switch (Updating to Updated, less
// the soak), the NotReady window (from the old machine's stop, in the
// agent's journal, to the first Ready the new kubelet posted: the API
// server rarely shows the Node NotReady at all, the new kubelet reports
// before the node controller's grace period ends) and the windows the
// Node was seen not Ready and unschedulable.
func (e *env) logFigures(t *testing.T, name string, w *nodeWatch, began time.Time, gen int64, took time.Duration) {
	t.Logf("BENCH rollout=%s nodes=%d apply-to-complete=%v", name, len(e.hosts), took.Round(time.Millisecond))
	ws := w.windows(began, name, gen)
	var names []string
	for n := range ws {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		o := ws[n]
		at := func(p fleet.Phase) time.Time { return o.Phase[p] }
		span := func(from, to time.Time) string {
			if from.IsZero() || to.IsZero() {
				return "unseen"
			}
			return to.Sub(from).Round(time.Millisecond).String()
		}
		sw := "unseen"
		if u, d := at(fleet.PhaseUpdating), at(fleet.PhaseUpdated); !u.IsZero() && !d.IsZero() {
			sw = (d.Sub(u) - soak).Round(time.Millisecond).String()
		}
		gap := "unknown"
		if m := e.host(n); m != nil {
			if d, err := e.servingGap(e.ctx, m, w, began); err != nil {
				t.Logf("%s: serving gap: %v", n, err)
			} else {
				gap = d.Round(time.Millisecond).String()
			}
		}
		t.Logf("BENCH rollout=%s node=%s staging=%s slot-wait=%s switch-without-soak=%s stop-to-ready=%s seen-not-ready=%v unschedulable-window=%v",
			name, n, span(began, at(fleet.PhaseStaged)), span(at(fleet.PhaseStaged), at(fleet.PhaseUpdating)), sw, gap,
			o.NotReady.Round(time.Millisecond), o.Unschedulable.Round(time.Millisecond))
	}
}

// host is the host of Node name; nil if none.
func (e *env) host(name string) *host {
	for _, m := range e.hosts {
		if m.name == name {
			return m
		}
	}
	return nil
}
