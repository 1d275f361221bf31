package systemd

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/Azure/aks-flex-node/internal/hostos"
)

// Manager runs systemctl against the live host, or edits a root tree
// offline (enable/disable through `systemctl --root`) when Root is not "/".
type Manager struct {
	Root string
	// Exec runs systemctl; nil means hostos.Exec. Tests and image baking
	// may replace it.
	Exec hostos.Runner
}

// NewManager returns a Manager for root ("" or "/" is the live host).
func NewManager(root string) *Manager {
	if root == "" {
		root = "/"
	}
	return &Manager{Root: root, Exec: hostos.Exec}
}

// Live reports whether this manager talks to a running systemd.
func (m *Manager) Live() bool { return m.Root == "/" }

func (m *Manager) systemctl(ctx context.Context, args ...string) (string, error) {
	if !m.Live() {
		args = append([]string{"--root=" + m.Root}, args...)
	}
	run := m.Exec
	if run == nil {
		run = hostos.Exec
	}
	out, err := run(ctx, "systemctl", args...)
	if err != nil {
		// The runner's error names the command and carries its stderr;
		// some failures (a unit's state, a job's result) are on stdout.
		if o := bytes.TrimSpace(out); len(o) > 0 {
			err = fmt.Errorf("%w: %s", err, o)
		}
		return string(out), err
	}
	return string(out), nil
}

func (m *Manager) needLive(op string) error {
	if !m.Live() {
		return fmt.Errorf("systemctl %s: not possible on --root %s (no running systemd there)", op, m.Root)
	}
	return nil
}

// DaemonReload makes systemd re-read unit files. Offline it is a no-op:
// the next boot reads them anyway.
func (m *Manager) DaemonReload(ctx context.Context) error {
	if !m.Live() {
		return nil
	}
	_, err := m.systemctl(ctx, "daemon-reload")
	return err
}

// Enable enables units, with one reload of systemd for all of them.
func (m *Manager) Enable(ctx context.Context, units ...string) error {
	_, err := m.systemctl(ctx, append([]string{"enable"}, units...)...)
	return err
}

func (m *Manager) Disable(ctx context.Context, unit string) error {
	_, err := m.systemctl(ctx, "disable", unit)
	return err
}

func (m *Manager) Start(ctx context.Context, unit string) error {
	if err := m.needLive("start"); err != nil {
		return err
	}
	_, err := m.systemctl(ctx, "start", unit)
	return err
}

func (m *Manager) Restart(ctx context.Context, unit string) error {
	if err := m.needLive("restart"); err != nil {
		return err
	}
	_, err := m.systemctl(ctx, "restart", unit)
	return err
}

// RestartNoBlock queues a restart of unit and returns without waiting
// for it: how a service restarts itself (a blocking systemctl in the
// unit's own cgroup is killed by the stop it waits for).
func (m *Manager) RestartNoBlock(ctx context.Context, unit string) error {
	if err := m.needLive("restart"); err != nil {
		return err
	}
	_, err := m.systemctl(ctx, "restart", "--no-block", unit)
	return err
}

func (m *Manager) Stop(ctx context.Context, unit string) error {
	if err := m.needLive("stop"); err != nil {
		return err
	}
	_, err := m.systemctl(ctx, "stop", unit)
	return err
}

// ResetFailed clears a unit's failed state and start-limit counter.
func (m *Manager) ResetFailed(ctx context.Context, unit string) error {
	if !m.Live() {
		return nil
	}
	_, err := m.systemctl(ctx, "reset-failed", unit)
	return err
}

// ActiveState returns systemd's ActiveState for a unit ("active",
// "inactive", "failed", "activating", ...). Unknown units are "inactive".
func (m *Manager) ActiveState(ctx context.Context, unit string) (string, error) {
	if err := m.needLive("show"); err != nil {
		return "", err
	}
	out, err := m.systemctl(ctx, "show", "--property=ActiveState", "--value", unit)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// IsEnabled reports whether a unit is enabled.
func (m *Manager) IsEnabled(ctx context.Context, unit string) bool {
	_, err := m.systemctl(ctx, "is-enabled", "--quiet", unit)
	return err == nil
}
