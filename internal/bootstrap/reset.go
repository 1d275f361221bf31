package bootstrap

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/systemd"
	"github.com/Azure/aks-flex-node/internal/task"
)

// ResetPhases are reset's phases: the agent service first (so nothing
// restarts the machines), then both machines of the blue/green pair,
// then every path start tracked.
func ResetPhases(o Options) []task.Phase {
	o.setDefaults()
	l := o.Layout
	mgr := systemd.NewManager(l.Root())
	var machines []task.Task
	for _, name := range l.Machines() {
		machines = append(machines, RemoveMachine(NewMachine(l, name, o.Exec), mgr))
	}
	return []task.Phase{
		{Name: "agent", Tasks: []task.Task{RemoveAgentService(l, mgr, o.Log)}},
		{Name: "machines", Tasks: machines},
		{Name: "files", Tasks: []task.Task{RemoveTrackedPaths(l, o.Log)}},
	}
}

// Reset undoes start, under the node lock: it stops and removes the agent
// service and the machines, then removes every path start tracked
// (deepest first). It is safe to run twice and after a half-finished
// start. The agent binary stays; uninstall.sh removes it.
func Reset(ctx context.Context, o Options) (bool, error) {
	o.setDefaults()
	lock, err := nodelock.Acquire(ctx, o.Layout, "reset", o.Lock)
	if err != nil {
		return false, err
	}
	defer lock.Release()
	r := &task.Runner{Log: o.Log}
	changed, err := r.Phases(ctx, ResetPhases(o)...)
	if mgr := systemd.NewManager(o.Layout.Root()); err == nil && changed && mgr.Live() {
		err = mgr.DaemonReload(ctx)
	}
	return changed, err
}
