package rollout

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// TestRestartedAgentResumesItsSoak: an agent stopped while its node
// soaks (its host rebooted: another boot ID) is started again from its
// Record: it re-adopts its slot under the new boot, never a second one,
// soaks again from its restart, and the rollout goes on; no other node
// takes the slot in between.
func TestRestartedAgentResumesItsSoak(t *testing.T) {
	requireE2E(t)
	const rollout, soak = "resume", 4 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	uid := labelledNode(t, rollout, "resume-a")
	labelledNode(t, rollout, "resume-b")
	pw := watchRollout(t, ctx, rollout)
	createRollout(t, rollout, 1, soak.String())
	record := filepath.Join(t.TempDir(), "rollout.json")
	a := &stubHost{switchFor: 300 * time.Millisecond}
	stopA := launchAgent(t, ctx, &fleet.Agent{NodeName: "resume-a", Host: a, RecordPath: record, BootID: "boot-1"})
	startAgent(t, ctx, "resume-b", &stubHost{stage: time.Second, switchFor: 300 * time.Millisecond})
	pw.waitFor(t, 30*time.Second, "resume-a soaking", func(m map[string]fleet.NodeRelease) bool {
		return m["resume-a"].Phase == fleet.PhaseUpdating && m["resume-a"].Step == fleet.StepSoak
	})
	stopA()
	rec, err := fleet.LoadRecord(record)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Phase != fleet.PhaseUpdating || rec.Step != fleet.StepSoak || rec.Slot == "" || rec.Applied == nil {
		t.Fatalf("the record of an agent stopped mid-soak: %+v", rec)
	}
	time.Sleep(2 * time.Second) // the slot is not renewed meanwhile, well within its TTL
	restarted := time.Now()
	launchAgent(t, ctx, &fleet.Agent{NodeName: "resume-a", Host: a, RecordPath: record, BootID: "boot-2"})
	pw.waitFor(t, 30*time.Second, "resume-a Updated", func(m map[string]fleet.NodeRelease) bool { return m["resume-a"].Phase == fleet.PhaseUpdated })
	if d := time.Since(restarted); d < soak {
		t.Errorf("Updated %v after the restart, before a whole soak (%v)", d, soak)
	}
	pw.waitFor(t, 30*time.Second, "both Updated", allIn([]string{"resume-a", "resume-b"}, fleet.PhaseUpdated))
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.peakSlots > 1 || pw.peakUpdate > 1 {
		t.Errorf("more than one at once: %d slots, %d Updating", pw.peakSlots, pw.peakUpdate)
	}
	if !pw.holderIDs["resume-a/"+string(uid)+"/boot-1"] || !pw.holderIDs["resume-a/"+string(uid)+"/boot-2"] {
		t.Errorf("holder identities %v: want resume-a's slot under boot-1, then re-adopted under boot-2", pw.holderIDs)
	}
	if u, ok := pw.updatingAt["resume-b"]; !ok || u.Before(restarted) {
		t.Errorf("resume-b started at %v, before resume-a's agent came back at %v", u, restarted)
	}
}

// TestManagedElsewhereNeverTakesASlot: a node whose config names an AKS
// Machine says so on its Node and never takes a slot; the rollout goes
// on without it.
func TestManagedElsewhereNeverTakesASlot(t *testing.T) {
	requireE2E(t)
	const rollout = "managed"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	labelledNode(t, rollout, "managed-arm")
	labelledNode(t, rollout, "managed-b")
	pw := watchRollout(t, ctx, rollout)
	createRollout(t, rollout, 1, "0s")
	launchAgent(t, ctx, &fleet.Agent{NodeName: "managed-arm", Host: &stubHost{}, ManagedElsewhere: true,
		RecordPath: filepath.Join(t.TempDir(), "rollout.json"), BootID: "b"})
	startAgent(t, ctx, "managed-b", &stubHost{switchFor: 200 * time.Millisecond})
	pw.waitFor(t, 30*time.Second, "ManagedElsewhere and Updated", func(m map[string]fleet.NodeRelease) bool {
		return m["managed-arm"].Phase == fleet.PhaseManagedElsewhere && m["managed-b"].Phase == fleet.PhaseUpdated
	})
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.slotHolders["managed-arm"] {
		t.Error("the node managed by its AKS Machine held a slot")
	}
	if r := pw.phase["managed-arm"]; r.Reason != "AKSMachine" {
		t.Errorf("managed-arm: %s", r)
	}
}

// countingHost counts the switches it was asked for.
type countingHost struct {
	stubHost
	switches atomic.Int32
}

func (h *countingHost) Switch(ctx context.Context, rel v1alpha1.Release, d time.Duration) error {
	h.switches.Add(1)
	return h.stubHost.Switch(ctx, rel, d)
}

// TestRestartedAgentRedoesAnInterruptedSwitch: an agent stopped in the
// middle of a switch (the host's repave cut short) comes back at the
// switch step: it re-adopts its slot, looks at what the node runs, and
// switches again since the node does not run the release yet.
func TestRestartedAgentRedoesAnInterruptedSwitch(t *testing.T) {
	requireE2E(t)
	const rollout = "reswitch"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	labelledNode(t, rollout, "reswitch-a")
	pw := watchRollout(t, ctx, rollout)
	createRollout(t, rollout, 1, "1s")
	record := filepath.Join(t.TempDir(), "rollout.json")
	h := &countingHost{stubHost: stubHost{switchFor: 2 * time.Second}}
	stop := launchAgent(t, ctx, &fleet.Agent{NodeName: "reswitch-a", Host: h, RecordPath: record, BootID: "boot-1"})
	pw.waitFor(t, 30*time.Second, "switching", func(m map[string]fleet.NodeRelease) bool {
		return m["reswitch-a"].Phase == fleet.PhaseUpdating && m["reswitch-a"].Step == fleet.StepSwitch
	})
	stop()
	if rec, err := fleet.LoadRecord(record); err != nil || rec.Phase != fleet.PhaseUpdating || rec.Step != fleet.StepSwitch || rec.Slot == "" {
		t.Fatalf("the record of an agent stopped mid-switch: %+v %v", rec, err)
	}
	launchAgent(t, ctx, &fleet.Agent{NodeName: "reswitch-a", Host: h, RecordPath: record, BootID: "boot-1"})
	pw.waitFor(t, 30*time.Second, "Updated", allIn([]string{"reswitch-a"}, fleet.PhaseUpdated))
	if n := h.switches.Load(); n != 2 {
		t.Errorf("%d switches; want the interrupted one and one more", n)
	}
	if h := releasedWithin(t, rollout, 10*time.Second); len(h) != 0 {
		t.Errorf("slots still held 10s after Updated: %v", h)
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.peakSlots > 1 {
		t.Errorf("%d slots held at once by one node", pw.peakSlots)
	}
}
