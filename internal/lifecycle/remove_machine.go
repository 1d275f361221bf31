package lifecycle

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/systemd"
	"github.com/Azure/aks-flex-node/internal/task"
)

type removeMachine struct {
	machine Machine
	mgr     *systemd.Manager
}

// RemoveMachine returns the task that stops the machine (on a live host)
// and removes its rootfs, its nspawn files and its image record.
func RemoveMachine(m Machine, mgr *systemd.Manager) task.Task {
	return &removeMachine{machine: m, mgr: mgr}
}

func (t *removeMachine) Name() string { return "remove-machine-" + t.machine.Name }

func (t *removeMachine) Do(ctx context.Context) (task.Result, error) {
	m := t.machine
	changed := false
	if t.mgr.Live() {
		if st, err := m.Control.State(ctx, m.Name); err == nil && st != "inactive" && st != "failed" && st != "" {
			task.Wait(ctx, "machine "+m.Name+" to power off (its pods to stop)")
			if err := m.Control.Stop(ctx, m.Name); err != nil {
				return task.Result{}, err
			}
			changed = true
		}
		_ = t.mgr.ResetFailed(ctx, machine.ServiceName(m.Name))
	}
	removed, err := machine.Remove(m.Layout, m.Name)
	return task.Result{Changed: changed || removed}, err
}
