package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/Azure/aks-flex-node/internal/drain"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/state"
)

// Issue 30 item 4 on this host: rolloutHost is a fleet.RollbackHost.

// SwitchBack switches the node back to its retained side
// (lifecycle.NewSwitchBack): cordon, drain (bounded by drainTimeout;
// DaemonSet pods stay, as in Switch), the serving side stopped and the
// retained one started as it was, with the repave's rollback; nothing is
// fetched. The agent clears its Record's applied release after it
// returns nil (the node no longer runs the release). A node that is not
// on the release its Record names (an earlier switch back finished
// before the agent could record it) has nothing to switch back: nil.
func (h *rolloutHost) SwitchBack(ctx context.Context, drainTimeout time.Duration) error {
	if done, err := h.backAlready(ctx); err != nil || done {
		return err
	}
	pods := h.beforeSwitch(ctx)
	c, err := h.current()
	if err != nil {
		return err
	}
	obs := &phaseObserver{ctx: ctx}
	o, applied, pf, err := repaveOptions(h.layout, h.log, c, repaveSettings{Loop: followRolloutLoop, DrainTimeout: drainTimeout, Nodes: h.nodes,
		Drain: drain.Options{IgnoreDaemonSets: true}, Observer: obs})
	if err != nil {
		return err
	}
	sides, err := state.Open(h.layout).Sides()
	if err != nil {
		return err
	}
	r, err := lifecycle.NewSwitchBack(o, *applied, sides)
	if err != nil {
		return switchBackError(err, "")
	}
	if _, err := r.Run(ctx, pf); err != nil {
		return switchBackError(err, obs.last())
	}
	h.noteBaseline(ctx, pods, "switch back")
	return nil
}

// backAlready says whether the node is off the release its rollout
// Record names already: a switch back that was interrupted after its
// commit point (the agent resumes it) must not switch the node forward
// again.
func (h *rolloutHost) backAlready(ctx context.Context) (bool, error) {
	rec, err := fleet.LoadRecord(h.layout.OnRoot(h.layout.RolloutRecord()))
	if errors.Is(err, fs.ErrNotExist) || (err == nil && rec.Applied == nil) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	running, err := h.Running(ctx, rec.Applied.Release)
	if err != nil {
		return false, fmt.Errorf("compare the applied release with what the node runs: %w", err)
	}
	if !running {
		h.log.Info(followRolloutLoop+": the node runs its retained side already (a switch back finished before the agent recorded it)", "rollout", rec.Applied.Rollout)
	}
	return !running, nil
}

// switchBackError is a failed switch back as the rollout reports it: at
// the rollback step always (the agent keeps the slot of a node Failed
// there), with the reason: RollbackRefused (no retained side, or its
// preflight refused), DrainRefused, DrainTimeout, RolledBack (the
// retained side did not come up; the release's side serves again) or
// RollbackFailed.
func switchBackError(err error, phase string) error {
	if busy(err) {
		return fmt.Errorf("%w: %w", fleet.ErrBusy, err)
	}
	var notRetained *lifecycle.NotRetainedError
	var refusedPF *lifecycle.RefusedError
	var rolledBack *lifecycle.RolledBackError
	var refused *drain.RefusedError
	reason := "RollbackFailed"
	switch {
	case errors.As(err, &notRetained) || errors.As(err, &refusedPF):
		reason = "RollbackRefused"
	case errors.As(err, &rolledBack):
		reason = "RolledBack"
	case phase == fleet.StepDrain && errors.As(err, &refused):
		reason = "DrainRefused"
	case phase == fleet.StepDrain:
		reason = "DrainTimeout"
	}
	return &fleet.StepError{Step: fleet.StepRollback, Reason: reason, Err: err}
}
