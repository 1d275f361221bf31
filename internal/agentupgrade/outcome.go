package agentupgrade

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/systemd"
	"github.com/Azure/aks-flex-node/internal/task"
)

// waitOutcome waits until the in-flight record of rec is resolved, by the
// new agent's confirmation or by recovery, and returns the result.
func waitOutcome(ctx context.Context, l layout.Layout, rec InFlight) (*Result, error) {
	// Recovery acts within a few seconds after the deadline; give it a
	// bounded margin before calling the outcome unknown.
	limit := time.Until(rec.Deadline) + 60*time.Second
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var res *Result
	task.Wait(ctx, fmt.Sprintf("agent %s (slot %s) to confirm itself healthy, or recovery to roll back (deadline %s)", rec.ToVersion, rec.ToSlot, rec.Deadline.Local().Format(time.TimeOnly)))
	defer task.Wait(ctx, "")
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		r, err := LoadInFlight(l)
		if err != nil || r != nil {
			return false, err
		}
		res, err = LoadResult(l)
		return err == nil, err
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("no outcome for the upgrade to %s by %s; see aks-flex-node status and journalctl -u %s -u %s",
			rec.ToVersion, time.Now().UTC().Format(time.RFC3339), layout.AgentUnitName, layout.RecoveryUnit)
	case err != nil:
		return nil, err
	case res == nil || res.ToVersion != rec.ToVersion || res.ToSlot != rec.ToSlot:
		return res, errors.New("the upgrade record was cleared but no matching result was written; see aks-flex-node status")
	case res.Result != ResultUpgraded:
		return res, fmt.Errorf("upgrade to %s %s: %s", rec.ToVersion, res.Result, res.Reason)
	}
	return res, nil
}

// armAttempts bounds how often armTimer starts the timer.
const armAttempts = 5

// armTimer starts the recovery timer, again if systemd cancels the start.
// A recovery check of an earlier upgrade that finds nothing in flight stops
// the timer with a job of its own; when that job lands while ours is queued,
// systemd cancels ours ("Job for aks-flex-node-recovery.timer canceled"),
// which says nothing about this upgrade. Seen in the upgrade tests when one
// upgrade followed another within the timer's two seconds. The waits grow
// by 200ms a try.
func armTimer(ctx context.Context, m *systemd.Manager) error {
	var err error
	attempt := 0
	after := wait.DelayFunc(func() time.Duration { return time.Duration(attempt) * 200 * time.Millisecond })
	_ = after.Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		attempt++
		if err = m.Start(ctx, layout.RecoveryTimer); err == nil {
			return true, nil
		}
		if attempt == armAttempts {
			return false, err
		}
		return false, nil
	})
	return err
}
