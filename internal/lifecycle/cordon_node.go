package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/task"
)

type cordonNode struct {
	client   *NodeClient
	nodeName string
	cordon   bool
	// keep, for an uncordon, says the Node was cordoned before the
	// command cordoned it (by an operator): then it stays cordoned.
	keep func() bool
}

// CordonNode returns the task that marks the Node unschedulable, as the
// node (the Node authorizer lets a node change its own spec); with cordon
// false it is uncordon-node, which marks it schedulable again.
func CordonNode(client *NodeClient, nodeName string, cordon bool) task.Task {
	return &cordonNode{client: client, nodeName: nodeName, cordon: cordon}
}

// UncordonUnlessCordonedBefore is uncordon-node for a command that
// cordoned the Node itself: when cordonedBefore says someone else had
// cordoned it before, the Node is left as they set it.
func UncordonUnlessCordonedBefore(client *NodeClient, nodeName string, cordonedBefore func() bool) task.Task {
	return &cordonNode{client: client, nodeName: nodeName, keep: cordonedBefore}
}

func (t *cordonNode) Name() string {
	if t.cordon {
		return "cordon-node"
	}
	return "uncordon-node"
}

func (t *cordonNode) Do(ctx context.Context) (task.Result, error) {
	if !t.cordon && t.keep != nil && t.keep() {
		return task.Result{Detail: "cordoned before this command cordoned it: left cordoned"}, nil
	}
	return SetUnschedulable(ctx, t.client, t.nodeName, t.cordon)
}

// SetUnschedulable sets the Node's spec.unschedulable to u unless it is
// already that.
func SetUnschedulable(ctx context.Context, client *NodeClient, name string, u bool) (task.Result, error) {
	cs, err := client.Get()
	if err != nil {
		return task.Result{}, err
	}
	// A fresh read (no resourceVersion), never a cached one: whether the
	// Node is cordoned already decides whether the repave later
	// uncordons it, and an operator's cordon of a moment ago must count.
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// AKS deletes the Node before the agent repaves to a Machine's
		// new goal: nothing is scheduled to a Node that is gone.
		return task.Result{Detail: fmt.Sprintf("Node %s is gone; nothing to mark", name)}, nil
	}
	if err != nil {
		return task.Result{}, fmt.Errorf("read Node %s: %w", name, err)
	}
	if n.Spec.Unschedulable == u {
		return task.Result{Detail: fmt.Sprintf("unschedulable=%t already", u)}, nil
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"unschedulable": u}})
	if _, err := cs.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return task.Result{}, fmt.Errorf("set Node %s unschedulable=%t: %w", name, u, err)
	}
	return task.Result{Changed: true, Detail: fmt.Sprintf("unschedulable=%t", u)}, nil
}
