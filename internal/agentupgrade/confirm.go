package agentupgrade

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/failpoint"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// RunningSlot returns the slot this process runs from, or "" when it runs
// from elsewhere (a binary outside the slots: a host whose unit predates
// them, a test).
func RunningSlot(l layout.Layout) string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	lib := l.OnRoot(l.LibDir())
	if r, err := filepath.EvalSymlinks(lib); err == nil {
		lib = r
	}
	if filepath.Dir(exe) != lib || !validSlot(l, filepath.Base(exe)) {
		return ""
	}
	return filepath.Base(exe)
}

// Confirm is the new agent's half of an upgrade: when an upgrade to the
// slot this agent runs from is in flight, it checks itself (its config
// loaded before this is called; the links name executable slots; current
// names this slot; it is the version the record expects), then moves
// last-good to its slot and clears the record. An error means the agent is
// not healthy: the caller exits non-zero, and recovery rolls back.
func Confirm(l layout.Layout, slot string, log *slog.Logger) (bool, error) {
	r, err := LoadInFlight(l)
	if err != nil || r == nil {
		return false, err
	}
	if slot == "" || slot != r.ToSlot {
		log.Info("upgrade in flight to another slot; not confirming", "to", r.ToVersion, "toSlot", r.ToSlot, "runningSlot", slot)
		return false, nil
	}
	if failpoint.Hit(StepConfirm) {
		log.Warn("test build: not confirming the upgrade", "to", r.ToVersion)
		return false, nil
	}
	// Everything from the deadline check to clearing the record happens
	// under the links lock the recovery script takes too, so a
	// confirmation and a rollback at the deadline cannot interleave:
	// whichever takes the lock first decides, and the other sees its
	// result. Waiting longer than the deadline is pointless: past it,
	// confirming is refused anyway.
	unlock, err := lockLinks(l, max(time.Until(r.Deadline), 0)+time.Second)
	if err != nil {
		return false, fmt.Errorf("confirm upgrade: %w", err)
	}
	defer unlock()
	if r, err = LoadInFlight(l); err != nil {
		return false, fmt.Errorf("confirm upgrade: %w", err)
	}
	if r == nil || r.ToSlot != slot {
		return false, errors.New("confirm upgrade: recovery resolved the upgrade first (see aks-flex-node status)")
	}
	cur, err := linkSlot(l, l.UpgradeSlots().Current)
	if err != nil {
		return false, fmt.Errorf("confirm upgrade: %w", err)
	}
	if cur != slot {
		return false, fmt.Errorf("confirm upgrade: current names %s, but this agent runs from %s", cur, slot)
	}
	if _, err := linkSlot(l, l.UpgradeSlots().LastGood); err != nil {
		return false, fmt.Errorf("confirm upgrade: %w", err)
	}
	if buildinfo.Version != r.ToVersion {
		return false, fmt.Errorf("confirm upgrade: this agent is %s, the upgrade record expects %s", buildinfo.Version, r.ToVersion)
	}
	// Past the deadline recovery may be rolling back right now; confirming
	// too would race it. Failing hands the decision to recovery.
	if time.Now().After(r.Deadline) {
		return false, fmt.Errorf("confirm upgrade: too late: the deadline %s has passed; recovery rolls back", r.Deadline.UTC().Format(time.RFC3339))
	}
	failpoint.Hit(StepConfirmChecked)
	if _, err := pointLink(l, l.UpgradeSlots().LastGood, slot); err != nil {
		return false, fmt.Errorf("confirm upgrade: %w", err)
	}
	failpoint.Hit(StepConfirmLastGood)
	res := Result{Result: ResultUpgraded, Reason: "the new agent confirmed itself healthy",
		FromSlot: r.FromSlot, FromVersion: r.FromVersion, ToSlot: r.ToSlot, ToVersion: r.ToVersion,
		Time: time.Now().UTC().Format(time.RFC3339), By: "agent"}
	if err := saveResult(l, res); err != nil {
		return false, fmt.Errorf("confirm upgrade: %w", err)
	}
	failpoint.Hit(StepConfirmResult)
	if err := clearInFlight(l); err != nil {
		return false, fmt.Errorf("confirm upgrade: %w", err)
	}
	log.Info("upgrade confirmed", "from", r.FromVersion, "to", r.ToVersion, "slot", slot, "took", time.Since(r.Started).Round(time.Millisecond))
	return true, nil
}
