package systemd

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// InstallAgentService writes the agent unit, reloads systemd when it
// changed, enables it and makes sure it runs (restarting it when its
// definition changed). It reports whether anything changed.
func InstallAgentService(ctx context.Context, l layout.Layout, m *Manager, log *slog.Logger, alsoEnable ...string) (bool, error) {
	text, err := AgentUnit(l)
	if err != nil {
		return false, err
	}
	path := l.OnRoot(l.Units().Agent)
	changed, err := fsutil.WriteFile(path, []byte(text), 0o644)
	if err != nil {
		return false, fmt.Errorf("install-service: %w", err)
	}
	log.Info("unit", "task", "write-agent-unit", "path", l.Units().Agent, "changed", changed)
	// systemctl enable reloads systemd itself (once for all the units it
	// is given: a reload is a quarter second or more on a busy host): a
	// changed unit needs its own daemon-reload only when nothing is
	// enabled here.
	enable := alsoEnable
	if !m.IsEnabled(ctx, layout.AgentUnitName) {
		enable = append([]string{layout.AgentUnitName}, alsoEnable...)
		changed = true
	}
	switch {
	case len(enable) > 0:
		if err := m.Enable(ctx, enable...); err != nil {
			return true, fmt.Errorf("install-service: %w", err)
		}
	case changed:
		if err := m.DaemonReload(ctx); err != nil {
			return true, fmt.Errorf("install-service: %w", err)
		}
	}
	if !m.Live() {
		return changed, nil
	}
	state, err := m.ActiveState(ctx, layout.AgentUnitName)
	if err != nil {
		return changed, fmt.Errorf("install-service: %w", err)
	}
	switch {
	case state == "active" && changed:
		err = m.Restart(ctx, layout.AgentUnitName)
	case state != "active" && state != "activating":
		_ = m.ResetFailed(ctx, layout.AgentUnitName)
		err = m.Start(ctx, layout.AgentUnitName)
		changed = true
	}
	if err != nil {
		return changed, fmt.Errorf("install-service: %w", err)
	}
	return changed, nil
}

// UninstallAgentService stops and disables the agent unit and removes its
// file. Missing pieces are fine: uninstall must work on half-installed hosts.
func UninstallAgentService(ctx context.Context, l layout.Layout, m *Manager, log *slog.Logger) (bool, error) {
	path := l.OnRoot(l.Units().Agent)
	if m.Live() {
		if state, err := m.ActiveState(ctx, layout.AgentUnitName); err == nil && state != "inactive" {
			if err := m.Stop(ctx, layout.AgentUnitName); err != nil {
				return false, fmt.Errorf("uninstall-service: %w", err)
			}
		}
	}
	if m.IsEnabled(ctx, layout.AgentUnitName) {
		if err := m.Disable(ctx, layout.AgentUnitName); err != nil {
			return false, fmt.Errorf("uninstall-service: %w", err)
		}
	}
	removed, err := fsutil.RemoveIfExists(path)
	if err != nil {
		return false, fmt.Errorf("uninstall-service: remove %s: %w", l.Units().Agent, err)
	}
	log.Info("unit", "task", "remove-agent-unit", "path", l.Units().Agent, "changed", removed)
	if removed {
		if err := m.DaemonReload(ctx); err != nil {
			return true, fmt.Errorf("uninstall-service: %w", err)
		}
		_ = m.ResetFailed(ctx, layout.AgentUnitName)
	}
	return removed, nil
}
