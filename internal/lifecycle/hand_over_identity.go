package lifecycle

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/task"
)

type handOverIdentity struct {
	from, to Machine
}

// HandOverIdentity returns the task that gives the machine to the node's
// identity from the machine from (node.HandOver: the kubelet's client
// certificate and key and its kubeconfig), so the kubelet there is the
// same Node, never a new one. from is stopped by then.
func HandOverIdentity(from, to Machine) task.Task { return &handOverIdentity{from: from, to: to} }

func (t *handOverIdentity) Name() string { return "hand-over-identity" }

func (t *handOverIdentity) Do(ctx context.Context) (task.Result, error) {
	changed, err := node.HandOver(t.from.Root(), t.to.Root())
	return task.Result{Changed: changed, Detail: t.from.Name + " -> " + t.to.Name}, err
}
