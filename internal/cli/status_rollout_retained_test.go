package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/fleet"
)

// After a fleet rollback status says which release the node runs again
// (the earlier rollout's) and which one its other side keeps.
func TestStatusRolloutNamesTheRetainedRelease(t *testing.T) {
	at := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	rec := &fleet.Record{Rollout: "r2", Generation: 1, Phase: fleet.PhaseRolledBack, Since: at,
		Applied:      &fleet.AppliedRelease{Rollout: "r1", Generation: 2, At: at.Add(-time.Hour)},
		Previous:     &fleet.AppliedRelease{Rollout: "r2", Generation: 1, At: at.Add(-time.Minute)},
		UnsentEvents: []fleet.UnsentEvent{{Reason: "RolloutRolledBack"}}}
	var b strings.Builder
	printRollout(&b, rolloutStatus{Record: rec})
	for _, want := range []string{
		"release:    rollout r1 generation 2 applied at 2026-12-06T06:00:00Z",
		"retained:   rollout r2 generation 1 on the other side (applied at 2026-12-06T06:59:00Z)",
		"events:     1 phase-change Events wait for the API server",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
}
