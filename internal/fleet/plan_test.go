package fleet

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

func held(n corev1.Node) corev1.Node {
	n.Labels[HoldLabel] = "true"
	return n
}

func cond(t *testing.T, st v1alpha1.RolloutStatus, typ string) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(st.Conditions, typ)
	if c == nil {
		t.Fatalf("no %s condition in %+v", typ, st.Conditions)
	}
	return c
}

func TestAggregateHeld(t *testing.T) {
	r := rollout(1, false)
	nodes := []corev1.Node{
		node("a", "edge", "edge-b", 1, PhaseUpdated), node("b", "edge", "edge-b", 1, PhaseUpdated),
		held(node("h2", "edge", "edge-b", 1, PhaseHeld)),
		held(node("h1", "edge", "", 0, "")),                 // held before its agent reported anything
		held(node("h0", "edge", "edge-b", 1, PhaseUpdated)), // held after it was updated: it is on the release
	}
	st, err := Aggregate(r, nodes, t0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Held != 2 || strings.Join(st.HeldNodes, ",") != "h1,h2" || st.Updated != 3 || st.Selected != 5 {
		t.Fatalf("held %d %v, updated %d, selected %d", st.Held, st.HeldNodes, st.Updated, st.Selected)
	}
	if c := cond(t, st, v1alpha1.ConditionComplete); c.Status != metav1.ConditionTrue {
		t.Errorf("held nodes blocked Complete: %+v", c)
	}
	if c := cond(t, st, v1alpha1.ConditionPaused); c.Status != metav1.ConditionFalse {
		t.Errorf("held nodes paused the rollout: %+v", c)
	}
	r.Spec.Strategy.RequireAll = true
	if st, _ = Aggregate(r, nodes, t0); cond(t, st, v1alpha1.ConditionComplete).Status != metav1.ConditionFalse {
		t.Error("requireAll: complete with two nodes held")
	}
	// Every node held: never complete (nothing was applied).
	r.Spec.Strategy.RequireAll = false
	if st, _ = Aggregate(r, []corev1.Node{held(node("h1", "edge", "", 0, ""))}, t0); cond(t, st, v1alpha1.ConditionComplete).Status != metav1.ConditionFalse {
		t.Error("complete with its only node held")
	}
}

func TestAggregatePlan(t *testing.T) {
	r := rollout(1, false)
	r.Spec.Strategy.Mode = v1alpha1.ModePlan
	nodes := []corev1.Node{
		node("a", "edge", "edge-b", 1, PhaseStaged), node("b", "edge", "edge-b", 1, PhaseStaged),
		node("c", "edge", "edge-b", 1, PhaseFailed), node("d", "edge", "", 0, ""),
		held(node("e", "edge", "", 0, "")),
	}
	st, err := Aggregate(r, nodes, t0)
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Plan; p == nil || *p != (v1alpha1.PlanStatus{Ready: 2, NotReady: 1, Pending: 1}) {
		t.Fatalf("plan %+v", st.Plan)
	}
	c := cond(t, st, v1alpha1.ConditionComplete)
	if c.Status != metav1.ConditionFalse || c.Reason != "PlanOnly" || !strings.HasPrefix(c.Message, "staged 2/4: 1 failed (c (RolledBack))") {
		t.Errorf("complete %+v", c)
	}
	if c := cond(t, st, v1alpha1.ConditionPaused); c.Status != metav1.ConditionFalse {
		t.Errorf("a plan's failed verdict paused it: %+v", c)
	}
	if c := cond(t, st, v1alpha1.ConditionProgressing); c.Reason != "Planning" {
		t.Errorf("progressing %+v", c)
	}
	nodes[3] = node("d", "edge", "edge-b", 1, PhaseStaged)
	if st, _ = Aggregate(r, nodes, t0); cond(t, st, v1alpha1.ConditionProgressing).Reason != "Planned" {
		t.Errorf("every verdict in: %+v", cond(t, st, v1alpha1.ConditionProgressing))
	}
	// Mode Rollout: no plan status, the usual conditions.
	r.Spec.Strategy.Mode = v1alpha1.ModeRollout
	if st, _ = Aggregate(r, nodes, t0); st.Plan != nil || cond(t, st, v1alpha1.ConditionPaused).Status != metav1.ConditionTrue {
		t.Errorf("rollout mode: plan %+v, paused %+v", st.Plan, cond(t, st, v1alpha1.ConditionPaused))
	}
}

func TestAggregateRollback(t *testing.T) {
	r := rollout(3, false)
	r.Spec.Rollback = &v1alpha1.RollbackRequest{Reason: "pods crash on B", RequestedBy: "fleet rollback"}
	nodes := []corev1.Node{
		node("a", "edge", "edge-b", 3, PhaseRolledBack), node("b", "edge", "edge-b", 3, PhaseUpdating),
		node("c", "edge", "edge-b", 2, PhaseUpdated), held(node("h", "edge", "", 0, "")),
	}
	st, err := Aggregate(r, nodes, t0)
	if err != nil {
		t.Fatal(err)
	}
	rb := st.Rollback
	if rb == nil || rb.RolledBack != 1 || rb.Reason != "pods crash on B" || !rb.RequestedAt.Time.Equal(t0) || rb.CompletedAt != nil {
		t.Fatalf("rollback %+v", rb)
	}
	if c := cond(t, st, ConditionRolledBack); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "1/3") {
		t.Errorf("rolled back %+v", c)
	}
	if c := cond(t, st, v1alpha1.ConditionProgressing); c.Status != metav1.ConditionTrue || c.Reason != "RollingBack" {
		t.Errorf("progressing %+v", c)
	}
	// Every node back: RolledBack True, Complete False, the times kept.
	r.Status = st
	nodes[1] = node("b", "edge", "edge-b", 3, PhaseRolledBack)
	nodes[2] = node("c", "edge", "edge-b", 3, PhaseRolledBack)
	later := t0.Add(time.Minute)
	if st, err = Aggregate(r, nodes, later); err != nil {
		t.Fatal(err)
	}
	if rb := st.Rollback; rb.RolledBack != 3 || !rb.RequestedAt.Time.Equal(t0) || rb.CompletedAt == nil || !rb.CompletedAt.Time.Equal(later) {
		t.Fatalf("rollback done %+v", rb)
	}
	if cond(t, st, ConditionRolledBack).Status != metav1.ConditionTrue || cond(t, st, v1alpha1.ConditionComplete).Reason != "RolledBack" ||
		cond(t, st, v1alpha1.ConditionComplete).Status != metav1.ConditionFalse {
		t.Errorf("conditions %+v", st.Conditions)
	}
	r.Status = st
	if st, _ = Aggregate(r, nodes, later.Add(time.Hour)); !st.Rollback.CompletedAt.Time.Equal(later) {
		t.Errorf("completedAt moved to %v", st.Rollback.CompletedAt)
	}
}

func TestAggregateWindow(t *testing.T) {
	r := rollout(1, false)
	if st, _ := Aggregate(r, nil, t0); st.Window != nil {
		t.Errorf("no windows, window status %+v", st.Window)
	}
	// t0 is Sunday 05:00Z.
	r.Spec.Strategy.Windows = []v1alpha1.Window{{Days: []v1alpha1.Weekday{"Sun"}, Start: "06:00", End: "07:00"}}
	st, _ := Aggregate(r, nil, t0)
	if w := st.Window; w == nil || w.Open || w.NextOpen == nil || !w.NextOpen.Time.Equal(utc("2026-12-06T06:00:00Z")) {
		t.Errorf("closed window %+v", w)
	}
	st, _ = Aggregate(r, nil, t0.Add(90*time.Minute))
	if w := st.Window; w == nil || !w.Open || !w.Closes.Time.Equal(utc("2026-12-06T07:00:00Z")) {
		t.Errorf("open window %+v", w)
	}
}
