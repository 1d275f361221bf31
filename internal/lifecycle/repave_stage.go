package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/recovery"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/task"
)

// The repave's phases that touch only the side that does not serve.
const (
	StagePhase   = "stage"
	PreparePhase = "prepare"
)

// StageLockCommand is how the node lock names a staging to a waiter.
const StageLockCommand = "rollout stage"

// ErrRepaveInFlight is Stage finding a repave in flight (its process
// died): the recovery finishes it first (the agent's finish-repave loop,
// or the next node upgrade), then staging can run.
var ErrRepaveInFlight = errors.New("a repave is in flight; it is recovered first")

// Stage runs the repave's preflight and its stage and prepare phases
// only, under the node lock: the new side's bundle fetched and verified,
// its worker image unpacked into the machine that does not serve, its
// components and files written, while the active side serves untouched
// (nothing is cordoned, nothing stops but the inactive machine). A later
// Run of a repave to the same config re-uses all of it: the stager finds
// the bundle verified (its record), provision-machine finds the rootfs
// already holding the image, and the other tasks change nothing. A
// preflight refusal is a *RefusedError.
func (r *Repave) Stage(ctx context.Context, pf Preflight) error {
	o := r.opts
	if o.Observer != nil {
		ctx = task.WithObserver(ctx, o.Observer)
	}
	lock, err := nodelock.Acquire(ctx, o.Layout, StageLockCommand, o.Lock)
	if err != nil {
		return err
	}
	defer lock.Release()
	if recovery.InFlight(o.Layout) {
		return ErrRepaveInFlight
	}
	if a, err := state.Open(o.Layout).Applied(); err != nil || a == nil || a.Machine != r.applied.Machine {
		return errors.Join(ErrStateMoved, err)
	}
	if err := r.preflight(ctx, pf); err != nil {
		return err
	}
	mode, err := machine.HostCgroupMode(o.Layout.Root())
	if err != nil {
		return fmt.Errorf("detect cgroup mode: %w", err)
	}
	runner := r.runner()
	for _, p := range r.Phases(mode) {
		if p.Name != StagePhase && p.Name != PreparePhase {
			continue
		}
		if _, err := runner.Phases(ctx, p); err != nil {
			return fmt.Errorf("%s machine %s: %w", p.Name, r.to.Name, err)
		}
	}
	r.start.progressf("node %s: %s staged on machine %s (Kubernetes %s); machine %s serves", o.Config.Agent.NodeName,
		"the release", r.to.Name, r.start.opts.Config.Components.Kubernetes, r.from.Name)
	return nil
}
