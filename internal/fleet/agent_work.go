package fleet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// errSlotLost is the cause the renewer cancels the work with.
var errSlotLost = errors.New("the slot was lost (not renewed within its TTL and taken over, or cleared)")

// The strategy's defaults, as the CRD defaults them (an object written
// before the defaults, or through a path without them, gets the same).
const (
	defaultDrainTimeout = 15 * time.Minute
	defaultSoak         = 5 * time.Minute
)

func strategyOf(r *v1alpha1.FlexNodeRollout) (drain, soak time.Duration) {
	drain, soak = defaultDrainTimeout, defaultSoak
	if d := r.Spec.Strategy.DrainTimeout; d != nil {
		drain = d.Duration
	}
	if d := r.Spec.Strategy.Soak; d != nil {
		soak = d.Duration
	}
	return drain, soak
}

// update is the node's turn, slot sl held: the release's agent binary
// (agent_release.go), switch (unless it resumes a soak, the release sets
// no node field, or the node turns out to run the release already), soak,
// release. from is the step a restarted agent resumes at ("" for a fresh
// turn). A failure keeps the slot (Slots.Fail) and reports Failed.
func (a *Agent) update(ctx context.Context, r *v1alpha1.FlexNodeRollout, sl *Slot, n *corev1.Node, from string) error {
	drainTimeout, soak := strategyOf(r)
	a.slot, a.rec.Slot = sl, sl.Lease.Name
	if from == "" {
		a.rec.CordonedBefore = n.Spec.Unschedulable
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := a.renew(wctx, cancel, sl)
	defer stop()
	if from == "" || from == StepAgent {
		// The release's agent binary first (agent_release.go).
		if err := a.agentStep(wctx, r, from); err != nil {
			return a.fail(ctx, wctx, r, sl, stop, StepAgent, ReasonAgentUpgradeFailed, err)
		}
	}
	if from != StepSoak && NodeFields(r.Spec.Release) {
		if err := a.switchTo(wctx, r, from, drainTimeout); err != nil {
			return a.fail(ctx, wctx, r, sl, stop, StepSwitch, "SwitchFailed", err)
		}
	}
	if err := a.report(ctx, PhaseUpdating, StepSoak, "", fmt.Sprintf("soaking for %s", soak)); err != nil {
		a.log().Warn("rollout: report the soak", "error", err)
	}
	if err := a.soak(wctx, soak); err != nil {
		return a.fail(ctx, wctx, r, sl, stop, StepSoak, "Unhealthy", err)
	}
	stop()
	// Updated is on the Node before the slot is free: the next node's
	// Updating can never show while this one still does, so a watch on
	// the Nodes never sees more than maxUnavailable Updating. A release
	// that fails leaves the slot to expire (it is not renewed).
	if err := a.report(ctx, PhaseUpdated, "", "", "switched and soaked for "+soak.String()); err != nil {
		return a.releaseLater(err) // issue 30 item 8: released once Updated is on the Node (agent_pending.go)
	}
	err := a.release(ctx, sl)
	if err != nil {
		return a.releaseLater(err) // issue 30 item 8
	}
	a.slot, a.rec.Slot = nil, ""
	a.metricsPhase(a.rec.Rollout, a.rec.Phase)
	return a.save()
}

// switchTo runs the Host's switch. A resumed switch (the agent stopped
// mid-switch; the repave's own recovery puts the node on one side), and
// each try after the node was busy (that recovery, or another command,
// held the node lock), first looks whether the node runs the release
// already.
func (a *Agent) switchTo(ctx context.Context, r *v1alpha1.FlexNodeRollout, from string, drainTimeout time.Duration) error {
	rel := r.Spec.Release
	applied := a.applied(r)
	pctx := withCommit(ctx, func() error { return a.recordSwitched(applied) })
	pctx = context.WithValue(pctx, progressKey{}, func(step string) {
		if step != a.rec.Step {
			if err := a.report(ctx, PhaseUpdating, step, "", "holds slot "+a.rec.Slot); err != nil {
				a.log().Warn("rollout: report the "+step, "error", err)
			}
		}
	})
	for look := from != ""; ; look = true {
		if look {
			running, err := a.Host.Running(ctx, rel)
			if err != nil {
				return fmt.Errorf("compare the release with what the node runs: %w", err)
			}
			if running {
				a.log().Info("rollout: the node runs the release (an interrupted switch had finished); soaking", "rollout", r.Name)
				return a.recordSwitched(applied)
			}
		}
		if err := a.report(ctx, PhaseUpdating, StepDrain, "", fmt.Sprintf("holds slot %s; cordon and drain (up to %s)", a.rec.Slot, drainTimeout)); err != nil {
			a.log().Warn("rollout: report the drain", "error", err)
		}
		err := a.Host.Switch(pctx, rel, drainTimeout)
		// The node's credential is the serving machine's: after a switch
		// (or its rollback) the clients are made again.
		if cerr := a.reconnect(); cerr != nil {
			a.log().Warn("rollout: reconnect after the switch", "error", cerr)
		}
		if errors.Is(err, ErrBusy) && ctx.Err() == nil {
			a.log().Info("rollout: the switch waits for another command that changes the node", "error", err)
			if !sleep(ctx, a.retryAfter()) {
				return ctx.Err()
			}
			continue
		}
		if err != nil {
			return err
		}
		// Recorded under the node lock already when the Host called
		// Committed; this covers a Host that does not.
		return a.recordSwitched(applied)
	}
}

// ErrSoakNotYet is a soak probe that judged nothing yet: the Host waits
// for something that takes a while after a switch (the pods the drain
// evicted back under their controllers) and bounds that wait itself,
// failing the probe with a StepError once it is over. The soak's window
// starts again after the last such answer.
var ErrSoakNotYet = errors.New("the soak waits")

// probeTimeout bounds one soak probe.
const probeTimeout = time.Minute

// soak asks Healthy at once and every probe interval for d: every answer
// must be healthy. A restarted agent soaks d again from its restart: a
// window it did not watch proves nothing.
func (a *Agent) soak(ctx context.Context, d time.Duration) error {
	probe := a.SoakProbe
	if probe <= 0 {
		probe = 5 * time.Second
	}
	if d > 0 && d/10 < probe {
		probe = max(d/10, 50*time.Millisecond)
	}
	deadline := time.Now().Add(d)
	for {
		// A probe that hangs (a machine's systemd that does not answer)
		// is a probe that failed, not a soak that never ends.
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := a.Host.Healthy(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			switch {
			case errors.Is(err, ErrSoakNotYet):
				// The Host waits for something to settle (the evicted
				// pods' controllers) within its own bound: the window
				// starts again once it has.
				a.log().Info("rollout: the soak waits", "why", err)
			case !unreachable(err):
				return err
			default:
				// Issue 30 item 8 (agent_pending.go): a probe that could
				// not ask the API server judges nothing; the soak waits
				// for it and watches its whole window again from its
				// return.
				a.log().Warn("rollout: the soak cannot ask the API server; it starts again once the API server answers", "error", err)
			}
			deadline = time.Now().Add(d)
			if !sleep(ctx, probe) {
				return ctx.Err()
			}
			continue
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		if !sleep(ctx, min(probe, left)) {
			return ctx.Err()
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// renew renews sl every third of its TTL until stopped (stop waits for
// it); a slot found lost cancels the work with errSlotLost, so the node
// stops disrupting itself (a cancelled repave rolls back). A renewal
// that fails (a timeout, the server's priority and fairness refusing it)
// is tried again soon, not a third of the TTL later (renewRetry): the
// others take over a slot unchanged for one and a half TTLs from a
// holder whose Node is schedulable, and a loaded API server can refuse
// several renewals in a row (the fleet simulator's 1,000-node rollout
// did).
func (a *Agent) renew(ctx context.Context, cancel context.CancelCauseFunc, sl *Slot) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		every := a.ttl() / 3
		t := time.NewTimer(every)
		defer t.Stop()
		failed := 0
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := a.slots.Renew(ctx, sl)
			switch {
			case errors.Is(err, ErrSlotLost):
				a.log().Warn("rollout: the slot was lost; stopping", "slot", sl.Lease.Name, "error", err)
				cancel(errSlotLost)
				return
			case err != nil && ctx.Err() == nil:
				failed++
				next := renewRetry(failed, every)
				a.log().Warn("rollout: renew the slot; trying again", "slot", sl.Lease.Name, "in", next.Round(time.Millisecond), "error", err)
				t.Reset(next)
			default:
				failed = 0
				t.Reset(every)
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// renewRetry is the wait before renewal attempt failed+1 after failed
// ones in a row: 1 s doubling, never more than every (the usual period),
// each 50-100 % of that at random so the holders a server refused
// together do not come back together.
func renewRetry(failed int, every time.Duration) time.Duration {
	d := every
	if failed < 8 {
		d = min(time.Second<<(failed-1), every)
	}
	return d/2 + rand.N(d/2+1)
}

// fail reports a failure of the turn: the slot is kept, marked with the
// step and reason (Slots.Fail), so the rollout pauses by itself. A turn
// cut short by the agent stopping is not a failure: the Record says
// where it was and the next agent resumes. A slot lost is reported
// without one.
func (a *Agent) fail(ctx, wctx context.Context, r *v1alpha1.FlexNodeRollout, sl *Slot, stop func(), step, reason string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	stop()
	a.rec.ResumedAt = resumedAt(r)
	if errors.Is(context.Cause(wctx), errSlotLost) {
		a.slot, a.rec.Slot = nil, ""
		return a.report(ctx, PhaseFailed, step, "SlotLost", fmt.Sprintf("%v: %v", errSlotLost, err))
	}
	step, reason = stepAndReason(err, step, reason)
	if ferr := a.slots.Fail(ctx, sl, step, reason); ferr != nil {
		a.log().Warn("rollout: mark the slot failed", "slot", sl.Lease.Name, "error", ferr)
		if !errors.Is(ferr, ErrSlotLost) {
			a.rec.SlotAction = slotFail // issue 30 item 8: marked once the API server answers (agent_pending.go)
		}
	}
	a.attachEvidence(ctx, step, reason, err) // issue 30: evidence on failure (evidence_agent.go)
	return a.report(ctx, PhaseFailed, step, reason, failMessage(err))
}

// release frees the slot, trying a few times (a release that never
// lands costs the next node one TTL, not correctness).
func (a *Agent) release(ctx context.Context, sl *Slot) error {
	var err error
	for attempt := range 4 {
		if err = a.slots.Release(ctx, sl); err == nil || errors.Is(err, ErrSlotLost) {
			return nil
		}
		if !sleep(ctx, time.Duration(attempt+1)*time.Second) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("release slot %s: %w", sl.Lease.Name, err)
}
