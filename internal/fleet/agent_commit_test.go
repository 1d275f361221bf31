package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// commitHost is a Host whose switch and switch back commit as the
// daemon's do (fleet.Committed from the repave's finish phase, under the
// node lock) and note the Record on disk right after, when a start
// waiting for the lock would read it.
type commitHost struct {
	path           string
	atSwitch       Record
	atBack         Record
	switched, back int
}

func (h *commitHost) Running(context.Context, v1alpha1.Release) (bool, error) { return false, nil }
func (h *commitHost) Stage(context.Context, v1alpha1.Release) error           { return nil }
func (h *commitHost) Healthy(context.Context) error                           { return nil }
func (h *commitHost) Switch(ctx context.Context, _ v1alpha1.Release, _ time.Duration) error {
	h.switched++
	if err := Committed(ctx); err != nil {
		return err
	}
	rec, err := LoadRecord(h.path)
	h.atSwitch = rec
	return err
}
func (h *commitHost) SwitchBack(ctx context.Context, _ time.Duration) error {
	h.back++
	if err := Committed(ctx); err != nil {
		return err
	}
	rec, err := LoadRecord(h.path)
	h.atBack = rec
	return err
}

// Issue 29: the Record's applied release is on disk at the switch's
// commit, while the repave holds the node lock, not after it returned;
// the release the node ran before is kept as the retained side's. A
// fleet rollback (switch back) makes that one applied again, at its own
// commit, so start converges to what the node runs, not to the config
// file's values.
func TestAppliedReleaseRecordedAtTheCommitAndKeptAcrossARollback(t *testing.T) {
	a, _, r, n, sl := cutAgent(t, nil)
	h := &commitHost{path: a.RecordPath}
	a.Host = h
	r.Spec.Release = v1alpha1.Release{WorkerImage: "worker@sha256:bbbb"}
	earlier := &AppliedRelease{Rollout: "a", Generation: 4, Release: v1alpha1.Release{WorkerImage: "worker@sha256:aaaa"}, At: time.Unix(1, 0).UTC()}
	a.rec.Applied = earlier
	if err := a.update(t.Context(), r, sl, n, ""); err != nil {
		t.Fatalf("update: %v", err)
	}
	if got := h.atSwitch; got.Applied == nil || got.Applied.Rollout != "b" || got.Previous == nil || got.Previous.Rollout != "a" {
		t.Fatalf("record at the switch's commit: applied %+v previous %+v; want b's, a's kept as the retained side's", got.Applied, got.Previous)
	}
	rec, err := LoadRecord(a.RecordPath)
	if err != nil || rec.Phase != PhaseUpdated || rec.Applied.From() != "rollout b generation 1" || rec.Previous.From() != "rollout a generation 4" {
		t.Fatalf("record after the update: %+v (%v)", rec, err)
	}

	sl, err = a.slotsFor(r, n).Acquire(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.switchBack(t.Context(), r, sl, h); err != nil {
		t.Fatalf("switch back: %v", err)
	}
	if got := h.atBack; got.Applied.From() != "rollout a generation 4" || got.Previous.From() != "rollout b generation 1" {
		t.Fatalf("record at the switch back's commit: applied %q previous %q; want a's applied again", got.Applied.From(), got.Previous.From())
	}
	rec, err = LoadRecord(a.RecordPath)
	if err != nil || rec.Phase != PhaseRolledBack || rec.Applied.From() != "rollout a generation 4" || rec.Applied.Release.WorkerImage != "worker@sha256:aaaa" ||
		rec.Previous.From() != "rollout b generation 1" {
		t.Fatalf("record after the rollback: %+v (%v)", rec, err)
	}
	if h.switched != 1 || h.back != 1 {
		t.Errorf("%d switches, %d switches back", h.switched, h.back)
	}
}

// The commit is recorded once: the hook and the switch's return both
// record it, and a switch the Host never committed through the hook (the
// simulator's) is recorded at its return.
func TestRecordSwitchedIsIdempotent(t *testing.T) {
	a := &Agent{RecordPath: t.TempDir() + "/rollout.json"}
	first := &AppliedRelease{Rollout: "a", Generation: 1}
	a.rec.Applied = first
	next := &AppliedRelease{Rollout: "b", Generation: 2}
	for range 2 {
		if err := a.recordSwitched(next); err != nil {
			t.Fatal(err)
		}
	}
	if a.rec.Applied != next || a.rec.Previous != first {
		t.Fatalf("after two records of one switch: applied %+v previous %+v", a.rec.Applied, a.rec.Previous)
	}
	for range 2 {
		if err := a.recordSwitchedBack(next); err != nil {
			t.Fatal(err)
		}
	}
	if a.rec.Applied != first || a.rec.Previous != next {
		t.Fatalf("after two records of one switch back: applied %+v previous %+v", a.rec.Applied, a.rec.Previous)
	}
	if err := Committed(context.Background()); err != nil {
		t.Errorf("Committed outside a switch: %v", err)
	}
	// A new rollout keeps both sides' releases and the unsent Events.
	a.rec.UnsentEvents = []UnsentEvent{{Reason: "RolloutUpdated"}}
	a.adopt(selecting("c", 1, time.Now(), nil))
	if a.rec.Applied != first || a.rec.Previous != next || len(a.rec.UnsentEvents) != 1 || a.rec.Rollout != "c" {
		t.Errorf("after adopting rollout c: %+v", a.rec)
	}
}
