package fleet

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// TestDecide30 is issue 30's rows of the decision table, through decide.
func TestDecide30(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	r := selecting("b", 3, t0, nil)
	plan := r.DeepCopy()
	plan.Spec.Strategy.Mode = v1alpha1.ModePlan
	at := func(p Phase, step, slot string) Record {
		return Record{Rollout: "b", UID: r.UID, Generation: 3, Phase: p, Step: step, Slot: slot}
	}
	old := func(rec Record) Record { rec.Generation = 2; return rec }
	held := view30{held: true}
	back := view30{rollingBack: true}
	closed := view30{gate: &StartDecision{Why: "outside the maintenance windows: closed; next opens 2026-12-06T22:00:00Z", Retry: t0.Add(15 * time.Hour)}}
	open := view30{gate: &StartDecision{Start: true}}
	for _, c := range []struct {
		name string
		v    view
		want action
		why  string // part of the reason, when it matters
	}{
		{"held, first sight", view{rollout: r, x30: held}, actHeld, "hold"},
		{"held, staged", view{rollout: r, rec: at(PhaseStaged, "", ""), x30: held}, actHeld, ""},
		{"held, reported", view{rollout: r, rec: at(PhaseHeld, "", ""), x30: held}, actWait, "held"},
		{"held, reported at an older generation", view{rollout: r, rec: old(at(PhaseHeld, "", "")), x30: held}, actHeld, ""},
		{"held mid-switch finishes first", view{rollout: r, rec: at(PhaseUpdating, StepSwitch, "b-slot-0"), x30: held}, actResume, ""},
		{"held while failed stays failed", view{rollout: r, rec: at(PhaseFailed, StepSwitch, "b-slot-0"), x30: held}, actWait, "fleet resume"},
		{"hold removed", view{rollout: r, rec: at(PhaseHeld, "", "")}, actStart, "removed"},
		{"plan: staged waits", view{rollout: plan, rec: at(PhaseStaged, "", ""), x30: open}, actWait, "mode Plan"},
		{"plan: first sight stages", view{rollout: plan}, actStart, ""},
		{"window closed", view{rollout: r, rec: at(PhaseStaged, "", ""), x30: closed}, actWait, "maintenance windows"},
		{"gate open", view{rollout: r, rec: at(PhaseStaged, "", ""), x30: open}, actTakeSlot, ""},
		{"rollback: updated", view{rollout: r, rec: at(PhaseUpdated, "", ""), x30: back}, actRollback, ""},
		{"rollback: staged", view{rollout: r, rec: at(PhaseStaged, "", ""), x30: back}, actRollback, ""},
		{"rollback: failed, its failure moot", view{rollout: r, rec: at(PhaseFailed, StepSwitch, "b-slot-0"), x30: back}, actRollback, ""},
		{"rollback: forward switch in flight finishes", view{rollout: r, rec: at(PhaseUpdating, StepSoak, "b-slot-0"), x30: back}, actResume, ""},
		{"rollback: switch back in flight resumes", view{rollout: r, rec: at(PhaseUpdating, StepRollback, "b-slot-0"), x30: back}, actRollback, ""},
		{"rollback: failed switch back waits for resume", view{rollout: r, rec: at(PhaseFailed, StepRollback, "b-slot-0"), x30: back}, actWait, "fleet resume"},
		{"rollback: done", view{rollout: r, rec: at(PhaseRolledBack, StepRollback, ""), x30: back}, actWait, "rolled back"},
		{"rollback: done at an older generation", view{rollout: r, rec: old(at(PhaseRolledBack, StepRollback, "")), x30: back}, actRollback, ""},
		{"rolled back, then a new generation without rollback", view{rollout: r, rec: old(at(PhaseRolledBack, "", ""))}, actStart, ""},
	} {
		got, why := decide(c.v)
		if got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%s: %s (%s), want %s (%q)", c.name, got, why, c.want, c.why)
		}
	}
	if actHeld.String() != "held" || actRollback.String() != "rollback" || actWait.String() != "wait" {
		t.Error("action names")
	}
	if d := closed.retry(t0); d != 15*time.Hour {
		t.Errorf("retry %v, want the window's opening", d)
	}
	if d := open.retry(t0); d != 0 {
		t.Errorf("retry %v with nothing to wait for", d)
	}
}

func TestRollingBack(t *testing.T) {
	r := selecting("b", 3, time.Now(), map[string]string{"pool": "edge"})
	mk := func(name string, p Phase, gen int64) *corev1.Node {
		n := node(name, "edge", "b", gen, p)
		return &n
	}
	nodes := []*corev1.Node{mk("a", PhaseUpdated, 3), mk("f", PhaseFailed, 3), mk("g", PhaseRolledBack, 2)}
	if RollingBack(r, nodes) {
		t.Error("onFailure Pause with a failure: rolling back")
	}
	r.Spec.Strategy.OnFailure = v1alpha1.FailureRollback
	if !RollingBack(r, nodes) {
		t.Error("onFailure Rollback with a failure: not rolling back")
	}
	if RollingBack(r, nodes[:1]) || RollingBack(r, []*corev1.Node{nodes[0], nodes[2]}) {
		t.Error("no failure at this generation: rolling back")
	}
	if !RollingBack(r, []*corev1.Node{nodes[0], mk("g", PhaseRolledBack, 3)}) {
		t.Error("the failed node back (RolledBack): the rollback stopped")
	}
	r.Spec.Strategy.OnFailure = v1alpha1.FailurePause
	r.Spec.Rollback = &v1alpha1.RollbackRequest{Reason: "x"}
	if !RollingBack(r, nil) {
		t.Error("spec.rollback: not rolling back")
	}
}

// TestAggregateOnFailureRollback: the first failure under onFailure
// Rollback starts the rollback in the status, named after it, and the
// record stays once the failed node reports RolledBack.
func TestAggregateOnFailureRollback(t *testing.T) {
	r := rollout(2, false)
	r.Spec.Strategy.OnFailure = v1alpha1.FailureRollback
	nodes := []corev1.Node{node("a", "edge", "edge-b", 2, PhaseUpdated), node("b", "edge", "edge-b", 2, PhaseFailed)}
	st, err := Aggregate(r, nodes, t0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rollback == nil || st.Rollback.RequestedBy != "onFailure" || !strings.Contains(st.Rollback.Reason, "b at switch (RolledBack)") {
		t.Fatalf("rollback %+v", st.Rollback)
	}
	r.Status = st
	nodes[1] = node("b", "edge", "edge-b", 2, PhaseRolledBack)
	st, _ = Aggregate(r, nodes, t0.Add(time.Minute))
	if st.Rollback == nil || !strings.Contains(st.Rollback.Reason, "b at switch") || st.Rollback.RolledBack != 1 || !st.Rollback.RequestedAt.Time.Equal(t0) {
		t.Fatalf("after the failed node is back: %+v", st.Rollback)
	}
	r.Spec.Strategy.OnFailure = v1alpha1.FailurePause
	r.Status = v1alpha1.RolloutStatus{}
	nodes[1] = node("b", "edge", "edge-b", 2, PhaseFailed)
	if st, _ = Aggregate(r, nodes, t0); st.Rollback != nil {
		t.Errorf("onFailure Pause: rollback %+v", st.Rollback)
	}
}
