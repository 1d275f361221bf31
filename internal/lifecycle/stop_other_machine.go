package lifecycle

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/task"
)

type stopOtherMachine struct{ machine Machine }

// StopOtherMachine returns the task that makes sure the side a repave
// prepares is stopped before its rootfs is touched: a machine's rootfs is
// never replaced under it. The agent keeps that side stopped; a side left
// running by hand is stopped here.
func StopOtherMachine(m Machine) task.Task { return &stopOtherMachine{machine: m} }

func (t *stopOtherMachine) Name() string { return "stop-other-machine" }

func (t *stopOtherMachine) Do(ctx context.Context) (task.Result, error) {
	m := t.machine
	st, err := m.Control.State(ctx, m.Name)
	if err != nil {
		return task.Result{}, err
	}
	if st == "inactive" || st == "failed" {
		return task.Result{Detail: "machine " + m.Name + " " + st}, nil
	}
	if err := m.Control.Stop(ctx, m.Name); err != nil {
		return task.Result{}, err
	}
	return task.Result{Changed: true, Detail: "machine " + m.Name + " stopped"}, nil
}
