package fleetrollout

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/test/aclhost"
)

// waveSpecs are TestFleetWaves' hosts: the same four kinds as specs,
// under their own names, so both tests can run side by side (each has
// its own lab, control plane and registry; the names keep their Nodes,
// logs and journals apart).
var waveSpecs = []spec{
	{name: "fw-acl-1", variant: aclhost.ACL, prefix: aclPrefix},
	{name: "fw-acl-2", variant: aclhost.ACL, prefix: aclPrefix},
	{name: "fw-acl-3", variant: aclhost.ACL, prefix: aclPrefix},
	{name: "fw-debian", variant: aclhost.Debian},
}

// wavesRollout is the rollout the first three scenarios move through:
// planned, rolled out, rolled back.
const wavesRollout = "waves"

// waves is TestFleetWaves' fleet and what one scenario measures for a
// later one.
type waves struct {
	*env
	// stagedIn is each node's time to a verdict in the plan (stage and
	// preflight, while it serves).
	stagedIn map[string]time.Duration
	// switchedIn is each node's switch in the rollout (Updating to
	// Updated, less the soak).
	switchedIn map[string]time.Duration
	// held is the node labelled flexnode.azure.com/hold=true in the
	// rollout (and the rollback).
	held *host
}

// TestFleetWaves is issue 30's "done means" on the fleet rollout e2e's
// hosts (three ACL-like, one Debian, on one bridge; joined at release
// A), each scenario starting where the one before left the fleet:
//
//   - plan: `fleet plan` of release B that one host cannot stage (the
//     filesystem its bundles are staged on is too small for B's bundle):
//     that host's verdict (Failed at stage, DiskFull) and the others
//     Staged in the rollout's status and `fleet status`; nothing
//     cordoned or NotReady, no slot taken;
//   - the host fixed, the same rollout switched to mode Rollout with a
//     canary of 1, maxUnavailable 50%, one node held and a maintenance
//     window that is closed now and opens a minute or two later: nothing
//     starts before it opens, the canary soaks before anyone else
//     starts, at most two Nodes disrupted at once, the held node skipped
//     and reported Held, `kubectl wait --for=condition=Complete`;
//   - `fleet rollback`: every node that switched goes back to its
//     retained side, at most two at once, with no byte pulled from the
//     site registry; the status records it and its reason;
//   - a rollout to C in which the last node to switch has its network
//     to the API server cut mid-switch for longer than its slot's TTL:
//     it finishes (or rolls back) on its own, reports once reconnected,
//     and its slot is released only after the report.
func TestFleetWaves(t *testing.T) {
	aclhost.RequireE2E(t)
	t.Parallel()
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	w := &waves{env: setUp(ctx, t, waveSpecs, nil), stagedIn: map[string]time.Duration{}, switchedIn: map[string]time.Duration{}}
	w.joinAll(t)
	t.Logf("BENCH waves-e2e setup-and-join=%v", time.Since(begin).Round(time.Millisecond))
	for _, sc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"plan-one-host-disk-too-small", w.plan},
		{"rollout-window-canary-50pct-hold", w.rollout},
		{"fleet-rollback-no-fetch", w.rollback},
		{"network-cut-mid-switch", w.networkCut},
	} {
		// Each scenario starts from where the one before left the fleet.
		if !t.Run(sc.name, sc.run) {
			return
		}
	}
	t.Logf("BENCH waves-e2e total=%v", time.Since(begin).Round(time.Millisecond))
}
