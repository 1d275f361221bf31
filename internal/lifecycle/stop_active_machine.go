package lifecycle

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

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
// new side is Ready only with a later one. A Node that is gone is no
// reason not to switch (or, as stop-new-machine, not to roll back): the
// mark is then the moment the machine stopped.
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
	gone := apierrors.IsNotFound(err)
	if err != nil && !gone {
		return task.Result{}, err
	}
	res, err := t.stop(ctx)
	if err != nil {
		return res, err
	}
	if gone {
		// No Node (AKS deletes it before a repave to a Machine's new
		// goal; an operator may have): the kubelet that starts next
		// registers it again. Only a heartbeat posted after this machine
		// stopped is that kubelet's, not one the stopped kubelet posted
		// as it re-registered the Node on its way out. Heartbeats have a
		// second's resolution, rounded down.
		hb = time.Now().Truncate(time.Second)
		res.Detail += "; Node " + t.nodeName + " is gone: its next Ready counts once posted after now"
	}
	t.heartbeat.Set(hb)
	return res, nil
}

// stop stops the machine unless it is stopped already.
func (t *stopActiveMachine) stop(ctx context.Context) (task.Result, error) {
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
