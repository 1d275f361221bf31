package agentupgrade

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/systemd"
)

// UnitPaths are the unit files InstallService writes besides the agent's.
func UnitPaths(l layout.Layout) []string { return []string{l.Units().Recovery, l.RecoveryTimerUnit()} }

// InstallService is the one install path for the agent service, used by
// install-service and by start's install-agent-service task (and so by
// Ignition's first boot): it seeds the slots, writes the recovery script,
// unit and timer, then the agent unit, and makes sure the agent runs. A
// re-run on an installed host changes nothing and restarts nothing.
func InstallService(ctx context.Context, l layout.Layout, m *systemd.Manager, log *slog.Logger) (bool, error) {
	seed, err := Seed(ctx, l)
	if err != nil {
		return false, fmt.Errorf("install-service: %w", err)
	}
	if seed.Changed {
		log.Info("slots", "task", "seed-upgrade-slots", "current", seed.Slot, "adopted", seed.Adopted, "changed", true)
	}
	script, err := RenderRecoveryScript(l)
	if err != nil {
		return false, fmt.Errorf("install-service: %w", err)
	}
	unit, err := RenderRecoveryUnit(l)
	if err != nil {
		return false, fmt.Errorf("install-service: %w", err)
	}
	timer, err := RenderRecoveryTimer()
	if err != nil {
		return false, fmt.Errorf("install-service: %w", err)
	}
	changed := seed.Changed
	unitsChanged := false
	// A write of these files killed mid-way (kill -9, a power cut) left its
	// pending file beside them; no later write reuses the name. The caller
	// holds the node lock, so none is another writer's.
	for _, p := range []string{l.RecoveryScript(), l.Units().Recovery, l.RecoveryTimerUnit(), l.Units().Agent} {
		if err := fsutil.RemovePending(l.OnRoot(p)); err != nil {
			return changed, fmt.Errorf("install-service: %w", err)
		}
	}
	for _, f := range []struct {
		path, text string
		mode       fs.FileMode
		unit       bool
	}{
		{l.RecoveryScript(), script, 0o755, false},
		{l.Units().Recovery, unit, 0o644, true},
		{l.RecoveryTimerUnit(), timer, 0o644, true},
	} {
		c, err := fsutil.WriteFile(l.OnRoot(f.path), []byte(f.text), f.mode)
		if err != nil {
			return changed, fmt.Errorf("install-service: %w", err)
		}
		log.Debug("file", "task", "write-recovery", "path", f.path, "changed", c)
		changed = changed || c
		unitsChanged = unitsChanged || (c && f.unit)
	}
	// Enabled, the timer runs the recovery check at every boot: that is how
	// an upgrade cut short by a power failure is recovered. systemctl
	// enable reloads systemd itself, so the timer is enabled in the same
	// call as the agent unit (one reload for both: a reload is a quarter
	// second or more on a busy host; a join used to pay four), and a
	// changed unit needs its own daemon-reload only when the timer was
	// enabled already.
	var enableTimer []string
	switch {
	case !m.IsEnabled(ctx, layout.RecoveryTimer):
		enableTimer = []string{layout.RecoveryTimer}
		changed = true
	case unitsChanged:
		if err := m.DaemonReload(ctx); err != nil {
			return changed, fmt.Errorf("install-service: %w", err)
		}
	}
	agentChanged, err := systemd.InstallAgentService(ctx, l, m, log, enableTimer...)
	changed = changed || agentChanged
	if err != nil {
		return changed, err
	}
	if seed.Adopted && !agentChanged && m.Live() {
		// A new binary became current: run it.
		if err := m.Restart(ctx, layout.AgentUnitName); err != nil {
			return changed, fmt.Errorf("install-service: %w", err)
		}
	}
	return changed, nil
}

// UninstallService stops and removes the recovery timer and unit, then the
// agent unit. The slots, links and recovery script stay: they are the
// binary, which reset keeps and uninstall.sh removes.
//
// Recovery goes first: a recovery run after the agent unit is gone would
// restart an agent whose unit file was removed. An upgrade cut short here
// is resolved the way recovery would resolve it, by pointing current back
// at last-good, and its records go before the agent is stopped: the binary
// reset keeps is then the confirmed one.
func UninstallService(ctx context.Context, l layout.Layout, m *systemd.Manager, log *slog.Logger) (bool, error) {
	changed := false
	if m.Live() {
		for _, u := range []string{layout.RecoveryTimer, layout.RecoveryUnit} {
			if state, err := m.ActiveState(ctx, u); err == nil && state != "inactive" && state != "failed" {
				if err := m.Stop(ctx, u); err != nil {
					return changed, fmt.Errorf("uninstall-service: %w", err)
				}
				changed = true
			}
		}
	}
	if m.IsEnabled(ctx, layout.RecoveryTimer) {
		if err := m.Disable(ctx, layout.RecoveryTimer); err != nil {
			return changed, fmt.Errorf("uninstall-service: %w", err)
		}
		changed = true
	}
	rolled, err := settleLinks(l, log)
	if err != nil {
		return changed, fmt.Errorf("uninstall-service: %w", err)
	}
	changed = changed || rolled
	// The upgrade records go with the units that act on them, and
	// before the agent stops: its ExecStopPost= then finds nothing in
	// flight and starts no recovery.
	for _, name := range []string{FailedFile, InFlightFile, ResultFile, LockFile, LinksLockFile} {
		r, err := fsutil.RemoveIfExists(statePath(l, name))
		if err != nil {
			return changed, fmt.Errorf("uninstall-service: remove %s: %w", l.StateDir()+"/"+name, err)
		}
		changed = changed || r
	}
	agentChanged, err := systemd.UninstallAgentService(ctx, l, m, log)
	changed = changed || agentChanged
	if err != nil {
		return changed, err
	}
	removed := false
	for _, p := range UnitPaths(l) {
		r, err := fsutil.RemoveIfExists(l.OnRoot(p))
		if err != nil {
			return changed, fmt.Errorf("uninstall-service: remove %s: %w", p, err)
		}
		log.Debug("unit", "task", "remove-recovery-unit", "path", p, "changed", r)
		removed = removed || r
	}
	if removed {
		changed = true
		if err := m.DaemonReload(ctx); err != nil {
			return changed, fmt.Errorf("uninstall-service: %w", err)
		}
		_ = m.ResetFailed(ctx, layout.RecoveryUnit)
	}
	return changed, nil
}

// settleLinks points current back at last-good when they differ (an
// upgrade in flight or cut short): nothing confirmed current then.
func settleLinks(l layout.Layout, log *slog.Logger) (bool, error) {
	differ := func() (string, string, error) {
		good, err := linkSlot(l, l.UpgradeSlots().LastGood)
		if err != nil || good == "" {
			return "", "", err
		}
		cur, _ := linkSlot(l, l.UpgradeSlots().Current)
		return cur, good, nil
	}
	// Look first without the lock: taking it creates the lock file, and a
	// second uninstall must change nothing.
	if cur, good, err := differ(); err != nil || good == "" || cur == good {
		return false, err
	}
	unlock, err := lockLinks(l, linksLockWait)
	if err != nil {
		return false, err
	}
	defer unlock()
	cur, good, err := differ()
	if err != nil || good == "" || cur == good {
		return false, err
	}
	if _, err := pointLink(l, l.UpgradeSlots().Current, good); err != nil {
		return false, err
	}
	log.Info("rolled back an unconfirmed upgrade", "task", "settle-upgrade-links", "current", good, "was", cur, "changed", true)
	return true, nil
}
