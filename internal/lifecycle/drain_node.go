package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/aks-flex-node/internal/drain"
	"github.com/Azure/aks-flex-node/internal/task"
)

type drainNode struct {
	client   *NodeClient
	nodeName string
	timeout  time.Duration
}

// DrainNode returns the task that evicts the node's pods through the
// Eviction API (internal/drain: PodDisruptionBudgets respected, DaemonSet
// and mirror pods left), up to timeout; when it passes, the error names
// the pods left.
func DrainNode(client *NodeClient, nodeName string, timeout time.Duration) task.Task {
	return &drainNode{client: client, nodeName: nodeName, timeout: timeout}
}

func (t *drainNode) Name() string { return "drain-node" }

func (t *drainNode) Do(ctx context.Context) (task.Result, error) {
	cs, err := t.client.Get()
	if err != nil {
		return task.Result{}, err
	}
	task.Wait(ctx, "the node's pods to be evicted (up to "+t.timeout.String()+")")
	n, err := drain.Drain(ctx, cs, t.nodeName, t.timeout)
	return task.Result{Changed: n > 0, Detail: fmt.Sprintf("%d pod(s) evicted", n)}, err
}
