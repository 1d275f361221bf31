package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// Issue 30 in the agent's loop: hold, plan mode, the start gate (windows,
// canaries, order) and the fleet rollback, wired into agent_decide.go and
// agent_pass.go at marked lines.

// StepRollback is the step of a node switching back under a rollback.
const StepRollback = "rollback"

// ReasonNotSwitched is a RolledBack node's reason when it never ran the
// release: nothing to switch back.
const ReasonNotSwitched = "NotSwitched"

// RollbackHost is what a Host adds to roll a node back without a
// download: SwitchBack cordons, drains (bounded by drainTimeout) and
// switches the node to its retained side (kube1/kube2), as the repave's
// own rollback does, and returns a *StepError like Switch. A Host without
// it reports Failed (RollbackUnsupported) under a rollback.
type RollbackHost interface {
	SwitchBack(ctx context.Context, drainTimeout time.Duration) error
}

// The actions issue 30 adds (numbered apart from agent_decide.go's).
const (
	actHeld action = iota + 100
	actRollback
)

// actionName30 names them for action.String.
func actionName30(a action) (string, bool) {
	switch a {
	case actHeld:
		return "held", true
	case actRollback:
		return "rollback", true
	}
	return "", false
}

// view30 is what a pass adds to the view for issue 30.
type view30 struct {
	held bool // the Node carries the hold label
	// rollingBack: spec.rollback is set, or onFailure is Rollback and a
	// node failed (or rolled back) at this generation.
	rollingBack bool
	// gate is MayStart's answer for a node that is Staged at the
	// rollout's generation (nil otherwise).
	gate *StartDecision
}

// retry is how long a waiting pass sleeps: until the gate's answer
// changes by itself (a window opens), else only a change wakes it.
func (x view30) retry(now time.Time) time.Duration {
	if x.gate == nil || x.gate.Retry.IsZero() {
		return 0
	}
	return max(x.gate.Retry.Sub(now), time.Second)
}

// view30 reads the hold label, the rollback and (for a staged node) the
// gate from the informers' view.
func (a *Agent) view30(r *v1alpha1.FlexNodeRollout, n *corev1.Node) view30 {
	if r == nil {
		return view30{}
	}
	nodes := a.cache.allNodes()
	x := view30{held: Held(n), rollingBack: RollingBack(r, nodes)}
	if a.rec.UID == r.UID && a.rec.Generation == r.Generation && a.rec.Phase == PhaseStaged && !x.rollingBack {
		d, err := MayStart(StartInput{Rollout: r, Self: a.NodeName, Nodes: nodeValues(nodes), Now: a.now()})
		if err != nil {
			d = StartDecision{Why: err.Error()}
		}
		x.gate = &d
	}
	return x
}

// RollingBack says whether r is rolling back: spec.rollback, or
// onFailure: Rollback with a selected node Failed or RolledBack at r's
// generation (the nodes cannot write the spec, so a failure under that
// policy is read as the request; RolledBack keeps it once the failed
// node is back).
func RollingBack(r *v1alpha1.FlexNodeRollout, nodes []*corev1.Node) bool {
	if r.Spec.Rollback != nil {
		return true
	}
	if r.Spec.Strategy.OnFailure != v1alpha1.FailureRollback {
		return false
	}
	s, ok := selector(r)
	if !ok {
		return false
	}
	for _, n := range nodes {
		if !s.Matches(labels.Set(n.Labels)) {
			continue
		}
		if nr, ok, err := ReadNodeRelease(n); ok && err == nil && nr.Rollout == r.Name && nr.Generation == r.Generation &&
			(nr.Phase == PhaseFailed || nr.Phase == PhaseRolledBack) {
			return true
		}
	}
	return false
}

// decide30 is issue 30's part of the decision table, asked before the
// rest (after managed elsewhere); ok false leaves it to decide.
func decide30(v view) (act action, why string, ok bool) {
	r, rec, x := v.rollout, v.rec, v.x30
	same := rec.UID == r.UID && rec.Generation == r.Generation
	busy := rec.UID == r.UID && (rec.Phase == PhaseUpdating || rec.Phase == PhaseFailed)
	switch {
	case x.held && !busy && same && rec.Phase == PhaseHeld:
		return actWait, "held: label " + HoldLabel + "=true", true
	case x.held && !busy:
		return actHeld, "label " + HoldLabel + "=true: skipped until it is removed", true
	case !x.held && rec.Phase == PhaseHeld:
		return actStart, "the hold label was removed", true
	}
	if x.rollingBack {
		switch {
		case rec.UID == r.UID && rec.Phase == PhaseUpdating && rec.Step != StepRollback:
			return 0, "", false // a forward switch in flight finishes first (resume)
		case rec.UID == r.UID && rec.Phase == PhaseFailed && rec.Step == StepRollback:
			return 0, "", false // a failed switch back keeps its slot: fleet resume
		case same && rec.Phase == PhaseRolledBack:
			return actWait, "rolled back", true
		}
		return actRollback, "rollout " + r.Name + " is rolling back", true
	}
	switch {
	case rec.Phase == PhaseRolledBack && !same:
		return actStart, fmt.Sprintf("rollout %s generation %d", r.Name, r.Generation), true
	case rec.Phase == PhaseRolledBack:
		return actWait, "rolled back", true
	case same && rec.Phase == PhaseStaged && r.Spec.Strategy.Mode == v1alpha1.ModePlan:
		return actWait, "staged; mode Plan: the verdict is reported, nothing drains", true
	case same && rec.Phase == PhaseStaged && x.gate != nil && !x.gate.Start:
		return actWait, "staged; " + x.gate.Why, true
	}
	return 0, "", false
}

// do30 carries out issue 30's actions.
func (a *Agent) do30(ctx context.Context, act action, r *v1alpha1.FlexNodeRollout, n *corev1.Node) (bool, time.Duration, error) {
	switch act {
	case actHeld:
		a.adopt(r)
		h := HeldRelease(r.Name, r.Generation)
		return false, 0, a.report(ctx, h.Phase, h.Step, h.Reason, h.Message)
	case actRollback:
		a.adopt(r)
		return a.rollback(ctx, r, n)
	}
	return false, 0, nil
}

// rollback is the node's part of a fleet rollback: a node not on the
// release has nothing to do (it frees a failed slot it still holds); a
// node on it waits its turn (Staged at step rollback), takes a slot,
// switches back to its retained side, soaks and frees the slot.
func (a *Agent) rollback(ctx context.Context, r *v1alpha1.FlexNodeRollout, n *corev1.Node) (bool, time.Duration, error) {
	resuming := a.rec.Phase == PhaseUpdating && a.rec.Step == StepRollback
	if !resuming {
		// A fleet rollback switches machines back; the agent binary of
		// the release stays (agent_release.go): it understands the
		// rollout, the old one may not, and its own recovery already
		// guards its health.
		if !NodeFields(r.Spec.Release) {
			return false, 0, a.report(ctx, PhaseRolledBack, "", ReasonNotSwitched, "the release sets only the agent binary, which a fleet rollback keeps: nothing to switch back")
		}
		rel := r.Spec.Release
		rel.Agent = nil
		running, err := a.Host.Running(ctx, rel)
		if err != nil {
			return false, 0, fmt.Errorf("compare the release with what the node runs: %w", err)
		}
		if !running {
			// A failed node is here too: its failed slot stays for fleet
			// resume to clear, and acquireBack counts it apart.
			return false, 0, a.report(ctx, PhaseRolledBack, "", ReasonNotSwitched, "not on the release: nothing to roll back")
		}
	}
	rb, ok := a.Host.(RollbackHost)
	if !ok {
		return false, 0, a.report(ctx, PhaseFailed, StepRollback, "RollbackUnsupported", "this host cannot switch back to its retained side")
	}
	if !resuming {
		if a.rec.Phase != PhaseStaged || a.rec.Step != StepRollback {
			if err := a.report(ctx, PhaseStaged, StepRollback, "", "on the release; waits for a slot to switch back"); err != nil {
				return false, 0, err
			}
		}
		d, err := MayStart(StartInput{Rollout: r, Self: a.NodeName, Nodes: nodeValues(a.cache.allNodes()), Now: a.now()})
		if err != nil || !d.Start {
			return false, a.retryAfter(), err
		}
	}
	sl, err := a.acquireBack(ctx, r, n)
	if errors.Is(err, ErrNoSlot) {
		return false, a.retryAfter(), nil
	}
	if err != nil {
		return false, 0, err
	}
	return false, 0, a.switchBack(ctx, r, sl, rb)
}

// switchBack is update's counterpart for a rollback, slot sl held.
func (a *Agent) switchBack(ctx context.Context, r *v1alpha1.FlexNodeRollout, sl *Slot, rb RollbackHost) error {
	drainTimeout, soak := strategyOf(r)
	a.slot, a.rec.Slot = sl, sl.Lease.Name
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := a.renew(wctx, cancel, sl)
	defer stop()
	if err := a.report(ctx, PhaseUpdating, StepRollback, "", "holds slot "+sl.Lease.Name+"; switching back to the retained side"); err != nil {
		a.log().Warn("rollout: report the rollback", "error", err)
	}
	from := a.rec.Applied
	err := a.switchBackWhenFree(withCommit(wctx, func() error { return a.recordSwitchedBack(from) }), rb, drainTimeout)
	if cerr := a.reconnect(); cerr != nil {
		a.log().Warn("rollout: reconnect after the switch back", "error", cerr)
	}
	if err != nil {
		return a.fail(ctx, wctx, r, sl, stop, StepRollback, "RollbackFailed", err)
	}
	// The release no longer applies: start must not converge back to it,
	// but to the retained side's (recorded under the node lock already
	// when the Host called Committed).
	if err := a.recordSwitchedBack(from); err != nil {
		a.log().Warn("rollout: save the record", "error", err)
	}
	if err := a.soak(wctx, soak); err != nil {
		return a.fail(ctx, wctx, r, sl, stop, StepRollback, "Unhealthy", err)
	}
	stop()
	if err := a.report(ctx, PhaseRolledBack, StepRollback, "", "switched back and soaked for "+soak.String()); err != nil {
		return a.releaseLater(err) // item 8: released once RolledBack is on the Node (agent_pending.go)
	}
	if err = a.release(ctx, sl); err != nil {
		return a.releaseLater(err)
	}
	a.slot, a.rec.Slot = nil, ""
	return a.save()
}

// switchBackWhenFree is RollbackHost.SwitchBack, tried again (as
// switchTo does) while the node is busy with another command that holds
// the node lock (the agent's own keeper takes it every pass).
func (a *Agent) switchBackWhenFree(ctx context.Context, rb RollbackHost, drainTimeout time.Duration) error {
	for {
		err := rb.SwitchBack(ctx, drainTimeout)
		if !errors.Is(err, ErrBusy) || ctx.Err() != nil {
			return err
		}
		a.log().Info("rollout: the switch back waits for another command that changes the node", "error", err)
		if !sleep(ctx, a.retryAfter()) {
			return ctx.Err()
		}
	}
}

// acquireBack takes a slot for a switch back: maxUnavailable counts
// only the nodes switching, so the slots failed nodes keep (marked
// failed; only fleet resume frees them, and those nodes are back on their
// old side, serving) are added to it.
func (a *Agent) acquireBack(ctx context.Context, r *v1alpha1.FlexNodeRollout, n *corev1.Node) (*Slot, error) {
	selected, _ := peers(r, a.cache.allNodes())
	mu, err := v1alpha1.ResolveMaxUnavailable(r.Spec.Strategy.MaxUnavailable, selected)
	if err != nil {
		return nil, fmt.Errorf("rollout %s: spec.strategy.maxUnavailable: %w", r.Name, err)
	}
	s := a.slotsFor(r, n)
	list, err := a.conn().Slots.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the slots: %w", err)
	}
	for i := range list.Items {
		if _, ok := s.index(list.Items[i].Name); ok && list.Items[i].Annotations[AnnotationFailedReason] != "" {
			mu++
		}
	}
	return s.Acquire(ctx, mu)
}

func nodeValues(ns []*corev1.Node) []corev1.Node {
	out := make([]corev1.Node, len(ns))
	for i, p := range ns {
		out[i] = *p
	}
	return out
}
