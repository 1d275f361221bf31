package fleet

import (
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// What issue 30 adds to Aggregate (aggregate.go calls these at three
// marked lines): held nodes, the plan's verdicts, the rollback's record,
// the windows.

// ConditionRolledBack is True when every selected node is back on its
// previous side under spec.rollback. Complete stays False then: it means
// the release is applied, and a script waiting on it must not read a
// rollback as success.
const ConditionRolledBack = "RolledBack"

// countHeld counts n as held when it carries the hold label and is not
// already Updated at r's generation (a node updated before it was held
// is on the release: it counts as updated). true: Aggregate counts
// nothing else for n.
func countHeld(st *v1alpha1.RolloutStatus, r *v1alpha1.FlexNodeRollout, n *corev1.Node) bool {
	if !Held(n) {
		return false
	}
	if rel, ok, err := ReadNodeRelease(n); ok && err == nil && rel.Rollout == r.Name && rel.Generation == r.Generation && rel.Phase == PhaseUpdated {
		return false
	}
	st.Held++
	if len(st.HeldNodes) < v1alpha1.MaxHeldNodes {
		st.HeldNodes = append(st.HeldNodes, n.Name)
	}
	return true
}

// countRolledBack counts a node's RolledBack phase at r's generation.
func countRolledBack(st *v1alpha1.RolloutStatus, rel NodeRelease) {
	if rel.Phase == PhaseRolledBack {
		if st.Rollback == nil {
			st.Rollback = &v1alpha1.RollbackStatus{}
		}
		st.Rollback.RolledBack++
	}
}

// required is how many selected nodes must be Updated (or RolledBack)
// for the rollout to be done: never those managed elsewhere; held nodes
// only under requireAll.
func required(st *v1alpha1.RolloutStatus, r *v1alpha1.FlexNodeRollout, elsewhere int32) int32 {
	if r.Spec.Strategy.RequireAll {
		return st.Selected - elsewhere
	}
	return st.Selected - st.Held - elsewhere
}

// finishExtras fills the plan, rollback and window status and sets the
// conditions they change, after setConditions.
func finishExtras(st *v1alpha1.RolloutStatus, r *v1alpha1.FlexNodeRollout, elsewhere int32, now time.Time) {
	sort.Strings(st.HeldNodes)
	if ws, err := CompileWindows(r.Spec.Strategy.Windows); err == nil && !ws.Any() {
		s := ws.At(now)
		st.Window = &v1alpha1.WindowStatus{Open: s.Open}
		if s.Open {
			st.Window.Closes = &metav1.Time{Time: s.Closes}
		} else if !s.NextOpen.IsZero() {
			st.Window.NextOpen = &metav1.Time{Time: s.NextOpen}
		}
	}
	set := func(typ string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg,
			ObservedGeneration: r.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
	// onFailure: Rollback rolls back without a spec change (the nodes
	// cannot write the spec): from a node's failure on, kept by the
	// RolledBack phases (RollingBack).
	derived := r.Spec.Strategy.OnFailure == v1alpha1.FailureRollback && (st.Failed > 0 || (st.Rollback != nil && st.Rollback.RolledBack > 0))
	switch {
	case r.Spec.Rollback != nil || derived:
		finishRollback(st, r, required(st, r, elsewhere), now, set)
	case r.Spec.Strategy.Mode == v1alpha1.ModePlan:
		finishPlan(st, r, elsewhere, set)
	}
	if r.Spec.Rollback == nil && !derived {
		meta.RemoveStatusCondition(&st.Conditions, ConditionRolledBack)
	}
}

type setCondition func(typ string, s metav1.ConditionStatus, reason, msg string)

func finishRollback(st *v1alpha1.RolloutStatus, r *v1alpha1.FlexNodeRollout, need int32, now time.Time, set setCondition) {
	rb := st.Rollback
	if rb == nil {
		rb = &v1alpha1.RollbackStatus{}
		st.Rollback = rb
	}
	prev := r.Status.Rollback
	switch {
	case r.Spec.Rollback != nil:
		rb.Reason, rb.RequestedBy, rb.RequestedAt = r.Spec.Rollback.Reason, r.Spec.Rollback.RequestedBy, r.Spec.Rollback.RequestedAt
	case prev != nil && prev.RequestedBy == "onFailure":
		rb.Reason, rb.RequestedBy = prev.Reason, prev.RequestedBy // the failure that started it
	default:
		var fs []string
		for _, f := range st.FailedNodes {
			fs = append(fs, fmt.Sprintf("%s at %s (%s)", f.Name, f.Step, f.Reason))
		}
		rb.Reason, rb.RequestedBy = bounded("onFailure: Rollback: failed: "+names(fs), 1024), "onFailure"
	}
	if rb.RequestedAt == nil && prev != nil && prev.RequestedAt != nil {
		rb.RequestedAt = prev.RequestedAt
	}
	if rb.RequestedAt == nil {
		rb.RequestedAt = &metav1.Time{Time: now}
	}
	msg := fmt.Sprintf("rollback (%s): %d/%d back on their previous side", rb.Reason, rb.RolledBack, need)
	if need > 0 && rb.RolledBack >= need {
		rb.CompletedAt = &metav1.Time{Time: now}
		if prev := r.Status.Rollback; prev != nil && prev.CompletedAt != nil {
			rb.CompletedAt = prev.CompletedAt
		}
		set(ConditionRolledBack, metav1.ConditionTrue, "AllNodesRolledBack", msg)
		set(v1alpha1.ConditionComplete, metav1.ConditionFalse, "RolledBack", msg)
		set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, "RolledBack", msg)
		return
	}
	set(ConditionRolledBack, metav1.ConditionFalse, "RollingBack", msg)
	set(v1alpha1.ConditionComplete, metav1.ConditionFalse, "RollingBack", msg)
	if !r.Spec.Paused && st.Failed == 0 {
		set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, "RollingBack", msg)
	}
}

// finishPlan: a plan is never Complete (nothing was applied); it is done
// when every node that is not held has a verdict, and its failures are
// verdicts, not a pause (a node that cannot stage holds no slot).
func finishPlan(st *v1alpha1.RolloutStatus, r *v1alpha1.FlexNodeRollout, elsewhere int32, set setCondition) {
	p := &v1alpha1.PlanStatus{Ready: st.Staged + st.Updated, NotReady: st.Failed}
	p.Pending = max(st.Selected-st.Held-elsewhere-p.Ready-p.NotReady, 0)
	st.Plan = p
	msg := fmt.Sprintf("staged %d/%d", p.Ready, st.Selected-st.Held-elsewhere)
	if p.NotReady > 0 {
		var fs []string
		for _, f := range st.FailedNodes {
			fs = append(fs, f.Name+" ("+f.Reason+")")
		}
		msg += fmt.Sprintf(": %d failed (%s)", p.NotReady, names(fs))
	}
	if st.Held > 0 {
		msg += fmt.Sprintf("; %d held", st.Held)
	}
	if p.Pending > 0 {
		msg += fmt.Sprintf("; %d without a verdict yet", p.Pending)
	}
	if need := st.Selected - elsewhere; need > 0 && st.Updated == need {
		return // every node runs it already: Complete holds
	}
	set(v1alpha1.ConditionComplete, metav1.ConditionFalse, "PlanOnly", msg)
	if r.Spec.Paused {
		set(v1alpha1.ConditionPaused, metav1.ConditionTrue, "PausedBySpec", "spec.paused is true")
	} else {
		set(v1alpha1.ConditionPaused, metav1.ConditionFalse, "PlanOnly", "a plan drains nothing; its failures are verdicts")
	}
	if p.Pending > 0 {
		set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, "Planning", msg)
	} else {
		set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, "Planned", msg)
	}
}
