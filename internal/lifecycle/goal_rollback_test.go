package lifecycle

import (
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// After a fleet rollback of rollout r2 the node runs its retained side,
// the release rollout r1 moved it to; the agent's Record says so (r1's
// applied again, r2's retained): start converges to r1's release, not to
// the config file's older values, and names r1 as the source.
func TestGoalAfterAFleetRollbackIsTheEarlierRollouts(t *testing.T) {
	l := goalLayout(t)
	file := &config.Config{}
	file.Components.Kubernetes, file.Bootstrap.OCIImage = "1.34.2", "registry.test/worker:file"
	r1 := "registry.test/worker@sha256:" + strings.Repeat("a1", 32)
	r2 := "registry.test/worker@sha256:" + strings.Repeat("b2", 32)
	at := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	rec := fleet.Record{Rollout: "r2", UID: "u2", Generation: 1, Phase: fleet.PhaseRolledBack, Step: fleet.StepRollback, Since: at,
		Applied:  &fleet.AppliedRelease{Rollout: "r1", Generation: 2, Release: v1alpha1.Release{KubernetesVersion: "v1.35.4", WorkerImage: r1}, At: at.Add(-time.Hour)},
		Previous: &fleet.AppliedRelease{Rollout: "r2", Generation: 1, Release: v1alpha1.Release{WorkerImage: r2}, At: at.Add(-time.Minute)}}
	if err := fleet.SaveRecord(l.OnRoot(l.RolloutRecord()), rec); err != nil {
		t.Fatal(err)
	}
	g, err := LoadGoal(l, file)
	if err != nil {
		t.Fatal(err)
	}
	if g.Config.Bootstrap.OCIImage != r1 || g.Config.Components.Kubernetes != "1.35.4" {
		t.Errorf("goal after the rollback: %s %s, want rollout r1's release", g.Config.Components.Kubernetes, g.Config.Bootstrap.OCIImage)
	}
	want := "components.kubernetes 1.35.4 from rollout r1 generation 2 (the config file says 1.34.2)\n" +
		"bootstrap.ociImage " + r1 + " from rollout r1 generation 2 (the config file says registry.test/worker:file)\n"
	if got := lines(g); got != want {
		t.Errorf("sources:\n%s\nwant:\n%s", got, want)
	}
}
