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
	opts     drain.Options
}

// DrainNode returns the task that evicts the node's pods through the
// Eviction API by kubectl drain's rules (internal/drain: PodDisruptionBudgets
// respected, mirror pods left, pods opts does not let it evict refuse the
// drain, named), up to timeout; when it passes, the error names the pods
// left.
func DrainNode(client *NodeClient, nodeName string, timeout time.Duration, opts drain.Options) task.Task {
	return &drainNode{client: client, nodeName: nodeName, timeout: timeout, opts: opts}
}

func (t *drainNode) Name() string { return "drain-node" }

func (t *drainNode) Do(ctx context.Context) (task.Result, error) {
	cs, err := t.client.Get()
	if err != nil {
		return task.Result{}, err
	}
	task.Wait(ctx, "the node's pods to be evicted (up to "+t.timeout.String()+")")
	n, err := drain.Drain(ctx, cs, t.nodeName, t.timeout, t.opts)
	return task.Result{Changed: n > 0, Detail: fmt.Sprintf("%d pod(s) evicted", n)}, err
}
