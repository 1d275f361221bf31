package upgrade

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/systemd"
)

func timerPath(l layout.Layout) string { return l.SystemdUnitDir + "/" + layout.RecoveryTimer }

// UnitPaths are the unit files InstallService writes besides the agent's.
func UnitPaths(l layout.Layout) []string { return []string{l.Units.Recovery, timerPath(l)} }

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
	changed := seed.Changed
	unitsChanged := false
	for _, f := range []struct {
		path, text string
		mode       fs.FileMode
		unit       bool
	}{
		{l.RecoveryScript, script, 0o755, false},
		{l.Units.Recovery, unit, 0o644, true},
		{timerPath(l), RecoveryTimer(), 0o644, true},
	} {
		c, err := fsutil.WriteFile(l.OnRoot(f.path), []byte(f.text), f.mode)
		if err != nil {
			return changed, fmt.Errorf("install-service: %w", err)
		}
		log.Debug("file", "task", "write-recovery", "path", f.path, "changed", c)
		changed = changed || c
		unitsChanged = unitsChanged || (c && f.unit)
	}
	if unitsChanged {
		if err := m.DaemonReload(ctx); err != nil {
			return changed, fmt.Errorf("install-service: %w", err)
		}
	}
	// Enabled, the timer runs the recovery check at every boot: that is how
	// an upgrade cut short by a power failure is recovered.
	if !m.IsEnabled(ctx, layout.RecoveryTimer) {
		if err := m.Enable(ctx, layout.RecoveryTimer); err != nil {
			return changed, fmt.Errorf("install-service: %w", err)
		}
		changed = true
	}
	agentChanged, err := systemd.InstallAgentService(ctx, l, m, log)
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

// UninstallService stops and removes the agent unit, then the recovery unit
// and timer. The slots, links and recovery script stay: they are the
// binary, which reset keeps and uninstall.sh removes.
func UninstallService(ctx context.Context, l layout.Layout, m *systemd.Manager, log *slog.Logger) (bool, error) {
	changed, err := systemd.UninstallAgentService(ctx, l, m, log)
	if err != nil {
		return changed, err
	}
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
	removed := false
	for _, p := range UnitPaths(l) {
		r, err := fsutil.RemoveIfExists(l.OnRoot(p))
		if err != nil {
			return changed, fmt.Errorf("uninstall-service: remove %s: %w", p, err)
		}
		log.Debug("unit", "task", "remove-recovery-unit", "path", p, "changed", r)
		removed = removed || r
	}
	// The upgrade records go with the units that act on them.
	for _, name := range []string{FailedFile, InFlightFile, ResultFile, LockFile} {
		r, err := fsutil.RemoveIfExists(statePath(l, name))
		if err != nil {
			return changed, fmt.Errorf("uninstall-service: remove %s: %w", l.StateDir+"/"+name, err)
		}
		changed = changed || r
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
