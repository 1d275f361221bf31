package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/preflight"
	"github.com/Azure/aks-flex-node/internal/recovery"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/task"
)

// RepaveLockCommand is how the node lock names a repave to a waiter.
const RepaveLockCommand = "node upgrade"

// ErrStateMoved is a repave whose applied state changed while it waited
// for the node lock (another repave ran): it is run again, from the side
// that serves now.
var ErrStateMoved = errors.New("the node's applied state changed while waiting for the node lock; run node upgrade again")

// Run runs the repave under the node lock: preflight (a *RefusedError
// before anything changes), then the phases, each recorded in the sides
// record as the step in flight before it runs. A failure in the switch
// phase rolls back. It returns the repave's record, as status shows it.
func (r *Repave) Run(ctx context.Context, pf Preflight) (*state.Repave, error) {
	o := r.opts
	began := o.Now()
	if o.Observer != nil {
		ctx = task.WithObserver(ctx, o.Observer)
	}
	lock, err := nodelock.Acquire(ctx, o.Layout, RepaveLockCommand, o.Lock)
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	// A repave or start killed mid-write left its pending state files
	// (a start that repaves removed them as it took the lock).
	if err := state.Open(o.Layout).RemovePending(); err != nil {
		return nil, err
	}
	return r.runLocked(ctx, func(ctx context.Context) error { return r.preflight(ctx, pf) }, began)
}

// runLocked is Run once the node lock is held (by node upgrade, or by a
// start that repaves): checks runs the preflight checks that refuse, then the
// phases run. began is when the command began.
func (r *Repave) runLocked(ctx context.Context, checks func(context.Context) error, began time.Time) (*state.Repave, error) {
	o := r.opts
	store := state.Open(o.Layout)
	if err := r.recoverInterrupted(ctx); err != nil {
		return nil, err
	}
	if a, err := store.Applied(); err != nil || a == nil || a.Machine != r.applied.Machine {
		return nil, errors.Join(ErrStateMoved, err)
	}
	if err := checks(ctx); err != nil {
		return nil, err
	}
	mode, err := hostCgroupMode(o.Layout.Root())
	if err != nil {
		return nil, fmt.Errorf("detect cgroup mode: %w", err)
	}
	sides, err := store.Sides()
	if err != nil || sides == nil {
		return nil, errors.Join(errors.New("no sides record"), err)
	}
	rec := &state.Repave{FromMachine: r.from.Name, ToMachine: r.to.Name, FromVersion: r.applied.KubernetesVersion,
		ToVersion: r.start.opts.Config.Components.Kubernetes, Started: began.UTC(), SwitchBack: r.back != nil}
	runner := r.runner()
	for _, p := range r.Phases(mode) {
		rec.Step = p.Name
		if p.Name == "drain" {
			rec.WasUnschedulable = r.unschedulable(ctx)
			r.cordonedBefore = rec.WasUnschedulable
		}
		sides.InFlight = rec
		if err := store.SaveSides(*sides); err != nil {
			return rec, err
		}
		if _, err := runner.Phases(ctx, p); err != nil {
			return rec, r.failed(ctx, sides, rec, p.Name, err)
		}
	}
	side := state.Side{KubernetesVersion: rec.ToVersion}
	if c, err := r.chosen.Get(); err == nil {
		side.Image = c.Ref
	}
	side.ImageDigest, _ = machine.ImageDigest(o.Layout, r.to.Name)
	sides.Machines[r.to.Name] = side
	sides.Active = r.to.Name
	r.finish(sides, rec, state.RepaveSucceeded, "")
	if err := store.SaveSides(*sides); err != nil {
		return rec, err
	}
	r.report(ctx, rec)
	r.start.progressf("node %s %s from %s (%s) to %s (%s) in %v", r.opts.Config.Agent.NodeName, r.verb(), rec.FromMachine, rec.FromVersion, rec.ToMachine, rec.ToVersion, rec.Duration)
	return rec, nil
}

// recoverInterrupted finishes a repave a crash or a power cut left in
// flight (internal/recovery), under the node lock Run holds, before this
// one looks at the applied state.
func (r *Repave) recoverInterrupted(ctx context.Context) error {
	rec, err := recovery.Repave(ctx, recovery.Env{Layout: r.opts.Layout, Control: r.from.Control,
		Client: r.client.Get, NodeName: r.opts.Config.Agent.NodeName, Log: r.opts.Log, Now: r.opts.Now})
	if rec != nil {
		r.start.progressf("an interrupted repave was recovered: %s", rec.Reason)
	}
	return err
}

// unschedulable says whether the Node is cordoned already (by someone
// else) as the drain begins; unknown is false.
func (r *Repave) unschedulable(ctx context.Context) bool {
	cs, err := r.client.Get()
	if err != nil {
		return false
	}
	// Fresh, as SetUnschedulable's: an operator's cordon must count.
	n, err := cs.CoreV1().Nodes().Get(ctx, r.opts.Config.Agent.NodeName, metav1.GetOptions{})
	return err == nil && n.Spec.Unschedulable
}

func (r *Repave) runner() *task.Runner {
	o := r.opts
	tr := &task.Runner{Log: o.Log, Now: o.Now, Observer: o.Observer}
	if o.Observer == nil {
		tr.Starting = func(name string) { r.start.progressf("%s ...", name) }
	}
	return tr
}

// finish closes rec with result and reason and makes it the last repave.
func (r *Repave) finish(sides *state.Sides, rec *state.Repave, result, reason string) {
	rec.Finished = r.opts.Now().UTC()
	rec.Duration = rec.Finished.Sub(rec.Started).Round(time.Millisecond)
	rec.Result, rec.Reason, rec.Step = result, reason, ""
	sides.InFlight, sides.Last = nil, rec
}

// RolledBackError is a repave whose new side did not become Ready: the
// old side serves again.
type RolledBackError struct {
	To     string
	Reason error
}

func (e *RolledBackError) Error() string {
	return fmt.Sprintf("rolled back: machine %s did not become Ready: %v", e.To, e.Reason)
}
func (e *RolledBackError) Unwrap() error { return e.Reason }

// failed records a repave that failed in phase and undoes what must be:
// before switch the old side still serves (a drain's cordon is lifted,
// unless the Node was cordoned before the repave);
// in switch the old side is brought back; in finish the new side serves.
func (r *Repave) failed(ctx context.Context, sides *state.Sides, rec *state.Repave, phase string, cause error) error {
	store := state.Open(r.opts.Layout)
	// The undo runs even when the run was cancelled, bounded.
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.ReadyTimeout+5*time.Minute)
	defer cancel()
	err := cause
	result := state.RepaveFailed
	r.cordonedBefore = rec.WasUnschedulable
	switch phase {
	case "drain":
		if _, uerr := r.uncordon().Do(uctx); uerr != nil {
			err = errors.Join(cause, fmt.Errorf("uncordon after the failed drain: %w", uerr))
		}
	case SwitchPhase:
		if _, rerr := r.runner().Phases(uctx, r.RollbackPhase()); rerr != nil {
			err = errors.Join(cause, fmt.Errorf("rollback: %w", rerr))
			break
		}
		result = state.RepaveRolledBack
		side := sides.Machines[r.to.Name]
		side.KubernetesVersion, side.Failed = rec.ToVersion, cause.Error()
		sides.Machines[r.to.Name] = side
		err = &RolledBackError{To: r.to.Name, Reason: cause}
	case "finish":
		if a, aerr := store.Applied(); aerr == nil && a != nil && a.Machine == r.to.Name {
			sides.Active = r.to.Name
			sides.Machines[r.to.Name] = state.Side{KubernetesVersion: rec.ToVersion, Image: a.Image, ImageDigest: a.ImageDigest}
		}
	}
	r.finish(sides, rec, result, err.Error())
	if serr := store.SaveSides(*sides); serr != nil {
		err = errors.Join(err, serr)
	}
	r.report(uctx, rec)
	return err
}

// preflight runs the repave's checks (preflight.RepaveChecks) against the
// new side's config, with the source checks wired to its stager and
// provisioner and the skew check to the API server, and refuses when an
// error counts.
func (r *Repave) preflight(ctx context.Context, pf Preflight) error {
	began := time.Now()
	pf.Env.Config = r.start.opts.Config
	if r.back != nil {
		return r.backPreflight(ctx, pf, began)
	}
	r.wireChecks(pf.Env)
	return runPreflight(ctx, preflight.RepaveChecks(pf.Env), pf, r.opts.Log, began)
}

// wireChecks plugs the new side's stager and provisioner into env's
// source checks, and the API server, as the node, into its skew checks.
func (r *Repave) wireChecks(env *preflight.Env) {
	r.start.WireChecks(env)
	r.wireServerVersion(env)
}

// wireServerVersion plugs the API server, as the node, into env's skew
// check.
func (r *Repave) wireServerVersion(env *preflight.Env) {
	env.ServerVersion = func(ctx context.Context) (string, error) {
		cs, err := r.client.Get()
		if err != nil {
			return "", err
		}
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			return "", err
		}
		return v.GitVersion, nil
	}
}
