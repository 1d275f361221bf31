package lifecycle

import (
	"context"
	"time"

	"github.com/Azure/aks-flex-node/internal/task"
)

type stopActiveMachine struct {
	name      string
	machine   Machine
	client    *NodeClient
	nodeName  string
	heartbeat *task.Output[time.Time]
}

// StopActiveMachine returns the task that stops the side that serves (its
// kubelet and pods with it), after reading the Node's last Ready
// heartbeat, which it hands to wait-node-version through heartbeat: the
// new side is Ready only with a later one.
func StopActiveMachine(m Machine, client *NodeClient, nodeName string, heartbeat *task.Output[time.Time]) task.Task {
	return &stopActiveMachine{name: "stop-active-machine", machine: m, client: client, nodeName: nodeName, heartbeat: heartbeat}
}

// StopNewMachine is stop-active-machine for a rollback: it stops the side
// the repave started, which did not become Ready.
func StopNewMachine(m Machine, client *NodeClient, nodeName string, heartbeat *task.Output[time.Time]) task.Task {
	return &stopActiveMachine{name: "stop-new-machine", machine: m, client: client, nodeName: nodeName, heartbeat: heartbeat}
}

func (t *stopActiveMachine) Name() string { return t.name }

func (t *stopActiveMachine) Do(ctx context.Context) (task.Result, error) {
	cs, err := t.client.Get()
	if err != nil {
		return task.Result{}, err
	}
	hb, err := readyHeartbeat(ctx, cs, t.nodeName)
	if err != nil {
		return task.Result{}, err
	}
	t.heartbeat.Set(hb)
	m := t.machine
	st, err := m.Control.State(ctx, m.Name)
	if err != nil {
		return task.Result{}, err
	}
	if st == "inactive" || st == "failed" {
		return task.Result{Detail: "machine " + m.Name + " already stopped"}, nil
	}
	task.Wait(ctx, "machine "+m.Name+" to power off")
	if err := m.Control.Stop(ctx, m.Name); err != nil {
		return task.Result{}, err
	}
	return task.Result{Changed: true, Detail: "machine " + m.Name + " stopped"}, nil
}
