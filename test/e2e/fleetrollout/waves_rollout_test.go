package fleetrollout

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// windowLead is the least time from the mode switch to the window's
// opening: enough for the fixed host to stage B again, so the opening,
// not staging, is what starts the first switch.
const windowLead = 75 * time.Second

// rollout: the disk fixed, one node labelled hold=true, the planned
// rollout is switched to mode Rollout with a canary of 1 and a window
// that opens at the first minute (by a node's clock) at least windowLead
// away. Before it opens nothing is cordoned and no slot is taken, the
// status and `fleet status` name the opening; after it, the canary (the
// first of the order `fleet status` shows) soaks before anyone else
// starts, at most 50% (two) Nodes are disrupted at once, the held node
// is reported Held and left alone, and the rollout completes.
func (w *waves) rollout(t *testing.T) {
	bad := w.hosts[1]
	w.fixBundles(t, bad)
	w.held = w.hosts[3]
	_, err := w.cp.Kubectl(w.ctx, nil, "label", "node", w.held.name, fleet.HoldLabel+"=true")
	must(t, err)
	nw := watchNodes(t, w.cp.Client)
	open, win := w.window(t)
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"strategy": map[string]any{
		"mode": v1alpha1.ModeRollout, "canary": 1, "windows": []v1alpha1.Window{win}}}})
	must(t, err)
	patched := time.Now()
	_, err = w.cp.Kubectl(w.ctx, nil, "patch", "fnr", wavesRollout, "--type", "merge", "-p", string(patch))
	must(t, err)
	gen := w.get(t, wavesRollout).Generation
	t.Logf("mode Rollout, canary 1, window %+v: opens in %v", win, time.Until(open).Round(time.Second))
	w.untilOpen(t, nw, open, gen)

	w.waitComplete(t, wavesRollout, 15*time.Minute)
	took := time.Since(patched)
	ro := w.get(t, wavesRollout)
	nodes, err := w.cp.Client.CoreV1().Nodes().List(w.ctx, metav1.ListOptions{})
	must(t, err)
	rows, err := fleet.RolloutOrder(ro, nodes.Items)
	must(t, err)
	if len(rows) != 3 || !rows[0].Canary || rows[1].Canary {
		t.Fatalf("order %+v; want three nodes (%s held), the first the canary", rows, w.held.name)
	}
	canary := rows[0].Node
	fs, err := w.fleetCLI(w.ctx, "status", wavesRollout)
	must(t, err)
	t.Logf("fleet status %s:\n%s", wavesRollout, fs)
	if !strings.Contains(fs, "ORDER") || !regexpLine(fs, `\b1\s+`+canary+`\s+canary\b`) {
		t.Errorf("fleet status does not show the order with %s as the canary", canary)
	}
	w.checkWaves(t, nw, patched, open, gen, canary)
	s := ro.Status
	if s.Selected != 4 || s.Updated != 3 || s.Held != 1 || len(s.HeldNodes) != 1 || s.HeldNodes[0] != w.held.name || s.Failed != 0 {
		t.Errorf("status after Complete: %+v; want 4 selected, 3 updated, %s held", s, w.held.name)
	}
	if r, err := w.release(w.ctx, w.held.name); err != nil || r.Phase != fleet.PhaseHeld || r.Reason != fleet.ReasonHoldLabel {
		t.Errorf("%s: %+v %v; want Held (%s)", w.held.name, r, err, fleet.ReasonHoldLabel)
	}
	for _, m := range w.hosts {
		if m == w.held {
			w.checkHostOnA(t, m)
			continue
		}
		w.checkHostOn(t, m, "b", "kube2")
	}
	t.Logf("BENCH waves rollout nodes=3 held=1 canary=1 maxUnavailable=50%% mode-switch-to-complete=%v", took.Round(time.Millisecond))
}

// window is a maintenance window, closed now, that opens at the first
// whole minute at least windowLead from now by a node's own clock (the
// day of the week is the opening's: a window opening after midnight is
// the next day's) and lasts an hour (an end past midnight closes on the
// next day, as windows read it).
func (w *waves) window(t *testing.T) (time.Time, v1alpha1.Window) {
	out := strings.TrimSpace(w.hosts[0].h.RunOK(t, "date", "+%s"))
	secs, err := strconv.ParseInt(out, 10, 64)
	must(t, err)
	now := time.Unix(secs, 0).UTC()
	open := now.Truncate(time.Minute).Add(time.Minute)
	for open.Sub(now) < windowLead {
		open = open.Add(time.Minute)
	}
	return open, v1alpha1.Window{
		Days:     []v1alpha1.Weekday{v1alpha1.Weekday(open.Weekday().String()[:3])},
		Start:    open.Format("15:04"),
		End:      open.Add(time.Hour).Format("15:04"),
		TimeZone: "UTC",
	}
}

// untilOpen watches the fleet until the window opens: no slot taken, no
// Node cordoned or NotReady; the held node reports Held, the others
// stage at the new generation; the status names the opening.
func (w *waves) untilOpen(t *testing.T, nw *nodeWatch, open time.Time, gen int64) {
	from := time.Now()
	var staged time.Time
	sawNext := false
	for time.Now().Before(open) {
		h, err := w.holders(w.ctx, wavesRollout)
		must(t, err)
		if len(h) > 0 && time.Now().Before(open) {
			t.Fatalf("slots of %s held before the window opens at %s: %v", wavesRollout, open.Format(time.RFC3339), h)
		}
		ro := w.get(t, wavesRollout)
		if wd := ro.Status.Window; !sawNext && ro.Status.ObservedGeneration == gen && wd != nil && !wd.Open && wd.NextOpen != nil && wd.NextOpen.Time.Equal(open) {
			sawNext = true
			fs, _ := w.fleetCLI(w.ctx, "status", wavesRollout)
			t.Logf("fleet status %s before the window opens:\n%s", wavesRollout, fs)
			if !strings.Contains(fs, "the next opens "+open.Format(time.RFC3339)) {
				t.Errorf("fleet status does not say when the next window opens (%s)", open.Format(time.RFC3339))
			}
		}
		if staged.IsZero() && w.allAt(gen, fleet.PhaseStaged) {
			staged = time.Now()
			t.Logf("every node but the held one Staged at generation %d, %v before the window opens", gen, open.Sub(staged).Round(time.Second))
		}
		time.Sleep(2 * time.Second)
	}
	// The loop ends up to a poll after the opening: only what the watch
	// saw before it counts.
	for _, ev := range nw.history() {
		if !ev.At.Before(from) && ev.At.Before(open) && ev.disrupted() {
			t.Errorf("%s cordoned or NotReady at %s, before the window opened at %s. Timeline:\n%s",
				ev.Node, ev.At.Format(time.RFC3339Nano), open.Format(time.RFC3339), nw.timeline(from))
			break
		}
	}
	if !sawNext {
		t.Errorf("the rollout's status never said the window opens at %s", open.Format(time.RFC3339))
	}
	if staged.IsZero() {
		t.Logf("not every node was Staged at generation %d when the window opened", gen)
	}
	if r, err := w.release(w.ctx, w.held.name); err != nil || r.Phase != fleet.PhaseHeld {
		t.Errorf("%s (labelled %s=true): %+v %v; want Held", w.held.name, fleet.HoldLabel, r, err)
	}
}

// allAt says whether every host but the held one reports phase at gen
// of the waves rollout.
func (w *waves) allAt(gen int64, phase fleet.Phase) bool {
	for _, m := range w.hosts {
		if m == w.held {
			continue
		}
		if r, err := w.release(w.ctx, m.name); err != nil || r.Rollout != wavesRollout || r.Generation != gen || r.Phase != phase {
			return false
		}
	}
	return true
}

// checkWaves checks the watch's history of the rollout: the first switch
// after the window opened; no other node Updating or disrupted before
// the canary was Updated (its soak done); at most two Nodes disrupted at
// once; the held node never. It logs the figures and keeps each node's
// switch time for the rollback's comparison.
func (w *waves) checkWaves(t *testing.T, nw *nodeWatch, since, open time.Time, gen int64, canary string) {
	ws := nw.windows(since, wavesRollout, gen)
	first := time.Time{}
	for _, ev := range nw.history() {
		r := ev.Release
		if !ev.At.Before(since) && (ev.Unschedulable || r.Rollout == wavesRollout && r.Generation == gen && r.Phase == fleet.PhaseUpdating) {
			first = ev.At
			break
		}
	}
	switch {
	case first.IsZero():
		t.Errorf("no switch seen. Timeline:\n%s", nw.timeline(since))
	case first.Before(open):
		t.Errorf("a switch began at %s, before the window opened at %s. Timeline:\n%s", first.Format(time.RFC3339Nano), open.Format(time.RFC3339), nw.timeline(since))
	default:
		t.Logf("BENCH waves window-open-to-first-switch=%v", first.Sub(open).Round(time.Millisecond))
	}
	cw := ws[canary]
	soaked := time.Time{}
	if cw != nil {
		soaked = cw.Phase[fleet.PhaseUpdated]
	}
	if soaked.IsZero() {
		t.Fatalf("the canary %s was never seen Updated. Timeline:\n%s", canary, nw.timeline(since))
	}
	for _, ev := range nw.history() {
		if ev.Node == canary || ev.At.Before(since) || !ev.At.Before(soaked) {
			continue
		}
		if ev.disrupted() || ev.Release.Rollout == wavesRollout && ev.Release.Generation == gen && ev.Release.Phase == fleet.PhaseUpdating {
			t.Errorf("%s started (or was disrupted) at +%v, before the canary %s finished its soak at +%v. Timeline:\n%s",
				ev.Node, ev.At.Sub(since).Round(time.Millisecond), canary, soaked.Sub(since).Round(time.Millisecond), nw.timeline(since))
			break
		}
	}
	peak, at, set := nw.maxDisrupted()
	if peak > 2 || peak == 0 {
		t.Errorf("%d Nodes disrupted at once at +%v (%v); maxUnavailable 50%% of 4 is 2. Timeline:\n%s", peak, at.Sub(since).Round(time.Millisecond), set, nw.timeline(since))
	}
	if nw.everDisrupted(since)[w.held.name] {
		t.Errorf("the held node %s was cordoned or NotReady. Timeline:\n%s", w.held.name, nw.timeline(since))
	}
	for _, m := range w.hosts {
		o := ws[m.name]
		if m == w.held || o == nil {
			continue
		}
		if s := o.Phase[fleet.PhaseStaged]; m == w.hosts[1] && !s.IsZero() {
			// The host the plan found too small staged B only now.
			w.stagedIn[m.name] = s.Sub(since)
		}
		u, d := o.Phase[fleet.PhaseUpdating], o.Phase[fleet.PhaseUpdated]
		if u.IsZero() || d.IsZero() {
			continue
		}
		w.switchedIn[m.name] = d.Sub(u) - soak
		t.Logf("BENCH waves rollout node=%s canary=%v started-after-open=%v switch-without-soak=%v unschedulable-window=%v most-disrupted-at-once=%d",
			m.name, m.name == canary, u.Sub(open).Round(time.Millisecond), w.switchedIn[m.name].Round(time.Millisecond), o.Unschedulable.Round(time.Millisecond), peak)
	}
}

// checkHostOnA checks m runs release A on kube1: the joined Kubernetes
// version and worker image a, its Node Ready at that kubelet and
// schedulable.
func (w *waves) checkHostOnA(t *testing.T, m *host) {
	t.Helper()
	st, err := m.status(w.ctx)
	if err != nil {
		t.Error(err)
		return
	}
	want := w.rel.workers["a"]
	digest := want[strings.LastIndex(want, "@")+1:]
	got := st.Machines[st.Active]
	if st.Active != "kube1" || got.ImageDigest != digest || got.KubernetesVersion != joined {
		t.Errorf("%s: active %s (Kubernetes %s, image %s), want kube1 on release A (Kubernetes %s, image %s)", m.name, st.Active, got.KubernetesVersion, got.ImageDigest, joined, digest)
	}
	ctx, cancel := context.WithTimeout(w.ctx, 2*time.Minute)
	defer cancel()
	n, err := w.node(ctx, m.name)
	if err != nil {
		t.Error(err)
		return
	}
	if n.Status.NodeInfo.KubeletVersion != "v"+joined || n.Spec.Unschedulable {
		t.Errorf("%s: Node at kubelet %s, unschedulable %v; want v%s, schedulable", m.name, n.Status.NodeInfo.KubeletVersion, n.Spec.Unschedulable, joined)
	}
}

// regexpLine says whether a line of text matches pattern.
func regexpLine(text, pattern string) bool {
	re := regexp.MustCompile(pattern)
	for _, l := range strings.Split(text, "\n") {
		if re.MatchString(l) {
			return true
		}
	}
	return false
}
