package agentupgrade

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/systemd"
	"github.com/Azure/aks-flex-node/internal/task"
)

// candidate is the binary an upgrade staged next to the slots, its
// SHA-256 and where it came from.
type candidate struct {
	path, sum, source string
}

// step is one step of agent-upgrade as a task named for the step. The
// runner hits the failpoint of that name when the step's work is done, so
// the crash tests stop the process exactly between two steps. changed
// says whether the step changes the host when it succeeds.
func step(name string, changed bool, do func(ctx context.Context) error) task.Task {
	return task.Func{N: name, F: func(ctx context.Context) (task.Result, error) {
		if err := do(ctx); err != nil {
			return task.Result{}, err
		}
		return task.Result{Changed: changed}, nil
	}}
}

// verifyCandidate stages the candidate next to the slots (so the final
// rename is atomic), verifying the checksum while it streams; a mismatch
// is refused and the staged file removed.
func verifyCandidate(l layout.Layout, o Options, out *task.Output[candidate]) task.Task {
	return step(StepVerified, false, func(ctx context.Context) error {
		src, desc, err := openCandidate(ctx, o.Binary, o.URL)
		if err != nil {
			return err
		}
		staged, sum, err := stage(l, src)
		src.Close()
		if err != nil {
			return fmt.Errorf("stage %s: %w", desc, err)
		}
		if sum != strings.ToLower(o.SHA256) {
			os.Remove(staged)
			return &RefusedError{Reason: fmt.Sprintf("checksum mismatch for %s: expected %s, got %s; nothing was changed", desc, strings.ToLower(o.SHA256), sum)}
		}
		out.Set(candidate{path: staged, sum: sum, source: desc})
		return nil
	})
}

// testCandidate test-runs the staged candidate: it must report a version.
func testCandidate(in *task.Output[candidate], out *task.Output[buildinfo.Info]) task.Task {
	return step(StepTested, false, func(ctx context.Context) error {
		c, err := in.Get()
		if err != nil {
			return err
		}
		info, err := TestRun(ctx, c.path)
		if err != nil {
			return &RefusedError{Reason: fmt.Sprintf("candidate %s does not run: %v; nothing was changed", c.source, err)}
		}
		out.Set(info)
		return nil
	})
}

// writeSlot renames the candidate into the inactive slot, which no link
// names: overwriting it is safe.
func writeSlot(l layout.Layout, in *task.Output[candidate], slot string) task.Task {
	return step(StepSlotWritten, true, func(context.Context) error {
		c, err := in.Get()
		if err != nil {
			return err
		}
		if err := os.Rename(c.path, slotPath(l, slot)); err != nil {
			return fmt.Errorf("write slot %s: %w", slot, err)
		}
		return fsutil.SyncDir(l.OnRoot(l.LibDir()))
	})
}

// armDeadline starts the deadline timer before the upgrade is recorded and
// before anything names the new slot, so every later crash is seen by
// recovery: its first check runs two seconds after it starts, long after
// the record is written, and a record never exists without a timer to
// resolve it (a check that finds no record stops the timer again).
func armDeadline(m *systemd.Manager) task.Task {
	return step(StepTimerArmed, true, func(ctx context.Context) error {
		_ = m.ResetFailed(ctx, layout.RecoveryTimer)
		if err := armTimer(ctx, m); err != nil {
			return fmt.Errorf("arm the upgrade deadline: %w", err)
		}
		return nil
	})
}

// recordUpgrade writes the in-flight record of plan, with its deadline,
// and hands it on through out.
func recordUpgrade(l layout.Layout, o Options, plan Plan, out *task.Output[InFlight]) task.Task {
	return step(StepRecorded, true, func(ctx context.Context) error {
		if _, err := fsutil.RemoveIfExists(statePath(l, FailedFile)); err != nil {
			return err
		}
		rec := InFlight{FromSlot: plan.FromSlot, FromVersion: plan.FromVersion, ToSlot: plan.ToSlot, ToVersion: plan.ToVersion,
			Started: time.Now(), Deadline: time.Now().Add(o.Deadline)}
		rec.SwitchMono, rec.BootID = switchClock()
		if err := saveInFlight(l, rec); err != nil {
			return err
		}
		// Again, now that the record exists: a recovery check that found
		// no record between the first start and the write may have
		// stopped the timer. Starting an active timer changes nothing.
		if err := armTimer(ctx, o.Manager); err != nil {
			return fmt.Errorf("arm the upgrade deadline: %w", err)
		}
		out.Set(rec)
		return nil
	})
}

// switchToNew points current at the recorded upgrade's slot.
func switchToNew(l layout.Layout, in *task.Output[InFlight], log *slog.Logger) task.Task {
	return step(StepSwitched, true, func(context.Context) error {
		rec, err := in.Get()
		if err != nil {
			return err
		}
		if err := switchCurrent(l, rec); err != nil {
			return err
		}
		log.Info("switched", "current", rec.ToSlot, "from", rec.FromVersion, "to", rec.ToVersion, "deadline", rec.Deadline.UTC().Format(time.RFC3339))
		return nil
	})
}

// restartAgent restarts the agent service, now on slot.
func restartAgent(m *systemd.Manager, slot string) task.Task {
	return step(StepRestarted, true, func(ctx context.Context) error {
		// The unit's start limit is there to stop crash loops; a
		// deliberate upgrade must not be refused because earlier upgrades
		// (or their rollbacks) restarted the agent, so reset the counter
		// first.
		_ = m.ResetFailed(ctx, layout.AgentUnitName)
		if err := m.Restart(ctx, layout.AgentUnitName); err != nil {
			return fmt.Errorf("restart the agent on %s (recovery rolls back at the deadline): %w", slot, err)
		}
		return nil
	})
}
