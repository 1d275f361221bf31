package fleetrollout

import (
	"fmt"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// rollbackReason is what the operator says in `fleet rollback`.
const rollbackReason = "waves e2e: back to release A"

// rollback: `fleet rollback` of the completed rollout. Every node that
// switched goes back to its retained side (kube1, release A), at most
// two at once (maxUnavailable 50%), with nothing pulled from the site
// registry (counted per host as it serves: no request, 0 bytes); the held node
// stays as it was; the status records the rollback, its reason and
// RolledBack. Each node's switch back is logged against its rollout
// (its verdict in the plan plus its switch).
func (w *waves) rollback(t *testing.T) {
	before := map[string]served{}
	for _, m := range w.hosts {
		before[m.name] = w.reg.sent(m.ns)
	}
	nw := watchNodes(t, w.cp.Client)
	began := time.Now()
	out, err := w.fleetCLI(w.ctx, "rollback", wavesRollout, "--reason", rollbackReason)
	must(t, err)
	t.Logf("fleet rollback %s:\n%s", wavesRollout, out)
	gen := w.get(t, wavesRollout).Generation
	if out, err := w.cp.Kubectl(w.ctx, nil, "wait", "--for=condition="+fleet.ConditionRolledBack, "--timeout=900s", "fnr/"+wavesRollout); err != nil {
		t.Fatalf("kubectl wait --for=condition=%s fnr/%s: %v\n%s\n%s", fleet.ConditionRolledBack, wavesRollout, err, out, w.describe(wavesRollout))
	}
	took := time.Since(began)
	var pulled served
	for _, m := range w.hosts {
		d := w.reg.sent(m.ns).minus(before[m.name])
		t.Logf("BENCH waves rollback node=%s registry-sent %s", m.name, d)
		pulled.BlobBytes += d.BlobBytes
		pulled.BlobRequests += d.BlobRequests
		pulled.ManifestBytes += d.ManifestBytes
		pulled.ManifestRequests += d.ManifestRequests
	}
	t.Logf("BENCH waves rollback registry-sent-all-hosts %s", pulled)
	// No fetch at all: not a blob, not even a manifest's lookup.
	if pulled != (served{}) {
		t.Errorf("the rollback asked the site registry: %s; want nothing", pulled)
	}
	ro := w.get(t, wavesRollout)
	fs, err := w.fleetCLI(w.ctx, "status", wavesRollout)
	must(t, err)
	t.Logf("fleet status %s:\n%s", wavesRollout, fs)
	rb := ro.Status.Rollback
	if rb == nil || rb.Reason != rollbackReason || rb.RolledBack != 3 || rb.CompletedAt == nil || rb.RequestedAt == nil {
		t.Errorf("status.rollback %+v; want reason %q, 3 rolled back, requested and completed", rb, rollbackReason)
	}
	if c := condition(ro, v1alpha1.ConditionComplete); c == nil || c.Status != "False" {
		t.Errorf("Complete %+v after a rollback; want False", c)
	}
	w.checkRolledBack(t, nw, began, gen)
	t.Logf("BENCH waves rollback nodes=3 request-to-rolled-back=%v", took.Round(time.Millisecond))
}

// checkRolledBack checks each node is back on release A (RolledBack at
// gen; the held one Held and never disrupted), at most two disrupted at
// once, and logs each node's switch back against its rollout.
func (w *waves) checkRolledBack(t *testing.T, nw *nodeWatch, since time.Time, gen int64) {
	peak, at, set := nw.maxDisrupted()
	if peak > 2 || peak == 0 {
		t.Errorf("%d Nodes disrupted at once at +%v (%v) in the rollback; maxUnavailable 50%% of 4 is 2. Timeline:\n%s", peak, at.Sub(since).Round(time.Millisecond), set, nw.timeline(since))
	}
	ws := nw.windows(since, wavesRollout, gen)
	for _, m := range w.hosts {
		w.checkHostOnA(t, m)
		r, err := w.release(w.ctx, m.name)
		if m == w.held {
			if err != nil || r.Phase != fleet.PhaseHeld || nw.everDisrupted(since)[m.name] {
				t.Errorf("%s (held): %+v %v, disrupted %v; want Held, left alone", m.name, r, err, nw.everDisrupted(since)[m.name])
			}
			continue
		}
		if err != nil || r.Generation != gen || r.Phase != fleet.PhaseRolledBack {
			t.Errorf("%s: %+v %v; want RolledBack at generation %d", m.name, r, err, gen)
		}
		o := ws[m.name]
		if o == nil || o.Phase[fleet.PhaseUpdating].IsZero() || o.Phase[fleet.PhaseRolledBack].IsZero() {
			t.Errorf("%s: its switch back was not seen (Updating, then RolledBack). Timeline:\n%s", m.name, nw.timeline(since))
			continue
		}
		back := o.Phase[fleet.PhaseRolledBack].Sub(o.Phase[fleet.PhaseUpdating]) - soak
		stage, sw := w.stagedIn[m.name], w.switchedIn[m.name]
		ratio := "unknown"
		if stage+sw > 0 {
			ratio = fmt.Sprintf("%.2f", back.Seconds()/(stage+sw).Seconds())
		}
		t.Logf("BENCH waves rollback node=%s switch-back-without-soak=%v rollout-stage=%v rollout-switch-without-soak=%v rollout-per-node=%v back/rollout=%s unschedulable-window=%v",
			m.name, back.Round(time.Millisecond), stage.Round(time.Millisecond), sw.Round(time.Millisecond), (stage + sw).Round(time.Millisecond), ratio, o.Unschedulable.Round(time.Millisecond))
	}
}
