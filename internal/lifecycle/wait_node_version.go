package lifecycle

import (
	"context"
	"time"

	"github.com/Azure/aks-flex-node/internal/task"
)

type waitNodeVersion struct {
	machine   Machine
	client    *NodeClient
	nodeName  string
	version   string
	timeout   time.Duration
	heartbeat *task.Output[time.Time]
	progress  func(string)
}

// WaitNodeVersion returns the task that waits, up to timeout, for the
// Node to be Ready at kubelet version v with a heartbeat later than the
// one stop-active-machine saw: the new side's kubelet serves. Its
// failure is what rolls a repave back.
func WaitNodeVersion(m Machine, client *NodeClient, nodeName, v string, timeout time.Duration, heartbeat *task.Output[time.Time], progress func(string)) task.Task {
	return &waitNodeVersion{machine: m, client: client, nodeName: nodeName, version: v, timeout: timeout, heartbeat: heartbeat, progress: progress}
}

func (t *waitNodeVersion) Name() string { return "wait-node-version" }

func (t *waitNodeVersion) Do(ctx context.Context) (task.Result, error) {
	after, err := t.heartbeat.Get()
	if err != nil {
		return task.Result{}, err
	}
	cs, err := t.client.Get()
	if err != nil {
		return task.Result{}, err
	}
	task.Wait(ctx, "Node "+t.nodeName+" to be Ready at kubelet "+t.version)
	if _, err := waitReadyAt(ctx, cs, t.nodeName, readyWant{version: t.version, after: after, since: "the switch"}, t.timeout, t.progress); err != nil {
		return task.Result{}, &notReadyError{err: err, hint: t.machine.logHint("kubelet")}
	}
	return task.Result{Detail: "Ready at kubelet " + t.version}, nil
}

// notReadyError is the new side not becoming Ready: what rolls back.
type notReadyError struct {
	err  error
	hint string
}

func (e *notReadyError) Error() string { return e.err.Error() + "; " + e.hint }
func (e *notReadyError) Unwrap() error { return e.err }
