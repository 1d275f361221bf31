package fleetrollout

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// cutRollout is the network cut scenario's rollout.
const cutRollout = "waves-cut"

// cutFor is how long the host is cut off: longer than its slot's TTL,
// so its lease could expire (nobody wants it: the others are done or
// switching) and every request the agent and kubelet make in the switch
// fails.
const cutFor = slotTTL + 10*time.Second

// cutTable is the nft table that cuts a host off, in its namespace only.
const cutTable = "afn_e2e_cut"

// networkCut: the hold lifted and the rolled-back rollout deleted, a
// rollout to C (maxUnavailable 2). When the last node to start is in its
// switch (Updating at step switch; every other node Updated or
// switching), its namespace drops every packet to and from the API
// server for cutFor. It keeps its slot meanwhile; once reconnected it
// reports Updated (or Failed, having rolled back) on its own, and its
// slot is released only after that report. The rollout ends Complete
// (or Paused naming it).
func (w *waves) networkCut(t *testing.T) {
	_, err := w.cp.Kubectl(w.ctx, nil, "label", "node", w.held.name, fleet.HoldLabel+"-")
	must(t, err)
	w.deleteRollout(t, wavesRollout)
	nw := watchNodes(t, w.cp.Client)
	began := time.Now()
	w.apply(t, rollout(cutRollout, w.rel.release("c"), 2, soak))
	gen := w.get(t, cutRollout).Generation
	target := w.lastInSwitch(t, gen)
	restore := w.cutAPIServer(t, target)
	cutAt := time.Now()
	t.Logf("cut %s off the API server (%s) in its switch", target.name, w.lab.Link.Outer)
	for time.Since(cutAt) < cutFor {
		h, err := w.holders(w.ctx, cutRollout)
		must(t, err)
		if _, ok := h[target.name]; !ok {
			t.Errorf("+%v into the cut, %s's slot is gone: holders %v", time.Since(cutAt).Round(time.Second), target.name, h)
		}
		// Cut off, the node can tell the API server nothing: what it
		// reported last (Updating) stands.
		if r, err := w.release(w.ctx, target.name); err != nil || r.Generation != gen || r.Phase != fleet.PhaseUpdating {
			t.Fatalf("+%v into the cut, %s reports %+v (%v): the cut did not hold", time.Since(cutAt).Round(time.Second), target.name, r, err)
		}
		if out, err := exec.Command("ip", "netns", "exec", filepath.Base(target.ns), "nft", "list", "table", "inet", cutTable).CombinedOutput(); err != nil {
			t.Fatalf("the cut's nft table is gone from %s's namespace: %v %s", target.name, err, out)
		}
		time.Sleep(time.Second)
	}
	restore()
	back := time.Now()
	t.Logf("%s reconnected after %v", target.name, back.Sub(cutAt).Round(time.Millisecond))
	r, reported, freed := w.reportThenRelease(t, target, gen)
	t.Logf("BENCH waves network-cut node=%s cut=%v reconnect-to-report=%v report-to-slot-free=%s phase=%s",
		target.name, back.Sub(cutAt).Round(time.Millisecond), reported.Sub(back).Round(time.Millisecond), since(reported, freed), r.Phase)
	w.logAgentSince(t, target, cutAt)
	if r.Phase == fleet.PhaseFailed {
		t.Logf("%s rolled back: %s", target.name, r.Message)
		w.checkPausedOn(t, cutRollout, target.name)
		return
	}
	w.waitComplete(t, cutRollout, 15*time.Minute)
	w.checkOnReleaseC(t, nw, began)
}

// lastInSwitch waits for a node in its switch while no node waits for a
// slot (every other one is Updated or Updating at gen): a slot its lease
// lets go of in the cut is one nobody takes, so what the test sees is the
// node's own doing.
func (w *waves) lastInSwitch(t *testing.T, gen int64) *host {
	var target *host
	deadline := time.Now().Add(15 * time.Minute)
	for target == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no node was seen in its switch with no other waiting for a slot in 15m:\n%s", w.describe(cutRollout))
		}
		ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
		var switching []*host
		waiting := 0
		for _, m := range w.hosts {
			r, err := w.release(ctx, m.name)
			switch {
			case err != nil || r.Rollout != cutRollout || r.Generation != gen:
				waiting++
			case r.Phase == fleet.PhaseUpdating && r.Step == fleet.StepSwitch:
				switching = append(switching, m)
			case r.Phase != fleet.PhaseUpdating && r.Phase != fleet.PhaseUpdated:
				waiting++
			}
		}
		cancel()
		if waiting == 0 && len(switching) > 0 {
			target = switching[len(switching)-1]
		}
		time.Sleep(250 * time.Millisecond)
	}
	return target
}

// cutAPIServer drops, in m's network namespace only, every packet to and
// from the API server's address (the registry on the namespace's
// loopback stays reachable); restore deletes the table (also at cleanup).
func (w *waves) cutAPIServer(t *testing.T, m *host) (restore func()) {
	ns := filepath.Base(m.ns)
	outer := w.lab.Link.Outer
	rules := fmt.Sprintf(`table inet %[1]s {
	chain out { type filter hook output priority -10; policy accept; ip daddr %[2]s drop; }
	chain in { type filter hook input priority -10; policy accept; ip saddr %[2]s drop; }
}
`, cutTable, outer)
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cut %s off: nft in %s: %v\n%s", m.name, ns, err, out)
	}
	done := false
	restore = func() {
		if done {
			return
		}
		done = true
		if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", cutTable).CombinedOutput(); err != nil {
			t.Errorf("reconnect %s: %v\n%s", m.name, err, out)
		}
	}
	t.Cleanup(restore)
	return restore
}

// reportThenRelease waits for m's report after the cut (Updated, or
// Failed at gen) and, when Updated, its slot's release; it fails t when
// the slot was free while m still reported Updating.
func (w *waves) reportThenRelease(t *testing.T, m *host, gen int64) (r fleet.NodeRelease, reported, freed time.Time) {
	w.waitFor(t, m.name+" reports, then frees its slot", 10*time.Minute, func(ctx context.Context) error {
		h, err := w.holders(ctx, cutRollout)
		if err != nil {
			return err
		}
		if r, err = w.release(ctx, m.name); err != nil {
			return err
		}
		done := r.Generation == gen && (r.Phase == fleet.PhaseUpdated || r.Phase == fleet.PhaseFailed)
		if done && reported.IsZero() {
			reported = time.Now()
		}
		_, holds := h[m.name]
		if !holds && freed.IsZero() {
			freed = time.Now()
			if !done {
				t.Errorf("%s's slot was free while it reported %s: released before the report", m.name, r)
			}
		}
		switch {
		case !done:
			return fmt.Errorf("%s", r)
		case r.Phase == fleet.PhaseUpdated && holds:
			return fmt.Errorf("Updated, still holding its slot")
		}
		return nil
	})
	return r, reported, freed
}

// checkOnReleaseC checks every node is on release C on kube2, Updated,
// and that no more than two Nodes were disrupted at once.
func (w *waves) checkOnReleaseC(t *testing.T, nw *nodeWatch, since time.Time) {
	w.checkOnRelease(t, cutRollout, "c", "kube2")
	if peak, at, set := nw.maxDisrupted(); peak > 2 {
		t.Errorf("%d Nodes disrupted at once at +%v (%v); maxUnavailable is 2. Timeline:\n%s", peak, at.Sub(since).Round(time.Millisecond), set, nw.timeline(since))
	}
	ro := w.get(t, cutRollout)
	if s := ro.Status; s.Updated != 4 || s.Failed != 0 || condition(ro, v1alpha1.ConditionComplete) == nil {
		t.Errorf("status after Complete: %+v", s)
	}
}

// since is to-from, or "never" when to is zero.
func since(from, to time.Time) string {
	if to.IsZero() {
		return "never"
	}
	return to.Sub(from).Round(time.Millisecond).String()
}

// logAgentSince logs m's agent's rollout and warning lines since from
// (bounded): what it did while cut off and once back.
func (w *waves) logAgentSince(t *testing.T, m *host, from time.Time) {
	j, _, err := m.h.Run(w.ctx, "journalctl", "--no-pager", "-u", "aks-flex-node-agent", "--since", "@"+fmt.Sprint(from.Unix()))
	if err != nil {
		t.Logf("%s: journalctl: %v", m.name, err)
		return
	}
	var lines []string
	for _, l := range strings.Split(j, "\n") {
		if strings.Contains(l, "rollout") || strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			lines = append(lines, l)
		}
	}
	if len(lines) > 60 {
		lines = append(lines[:30], append([]string{"..."}, lines[len(lines)-30:]...)...)
	}
	t.Logf("%s: its agent since the cut:\n%s", m.name, strings.Join(lines, "\n"))
}
