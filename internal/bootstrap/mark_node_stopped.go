package bootstrap

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/Azure/aks-flex-node/internal/task"
)

// NodeStoppedReason is the Ready condition's reason reset leaves on the
// Node: the kubelet no longer runs.
const NodeStoppedReason = "KubeletStopped"

type markNodeStopped struct {
	client   *NodeClient
	nodeName string
	timeout  time.Duration
}

// MarkNodeStopped returns the task that tells the API server, once reset
// stopped the machines, that the node's kubelet no longer runs: its Ready
// condition becomes Unknown, as the node lifecycle controller makes it
// only after its grace period (40 s by default), and the heartbeat is
// left as the kubelet last posted it. It is told, not waited for: a
// cluster that is gone or refuses costs at most timeout, and reset goes
// on (the detail says why). A kubelet that joins the Node again then
// finds it not Ready and reports its own Ready at once, instead of at its
// next status sync 10 s on (write-pod-network). client was made before
// the machines, which hold its credential, were removed; nodeName is ""
// on a host that never joined.
func MarkNodeStopped(client *NodeClient, nodeName string, timeout time.Duration) task.Task {
	return &markNodeStopped{client: client, nodeName: nodeName, timeout: timeout}
}

func (t *markNodeStopped) Name() string { return "mark-node-stopped" }

func (t *markNodeStopped) Do(ctx context.Context) (task.Result, error) {
	if t.nodeName == "" || t.client == nil {
		return task.Result{}, nil
	}
	cs, err := t.client.Get()
	if err != nil {
		return task.Result{Detail: "not told: " + err.Error()}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	changed := false
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, t.nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i, c := range n.Status.Conditions {
			if c.Type != corev1.NodeReady || c.Status == corev1.ConditionUnknown {
				continue
			}
			n.Status.Conditions[i].Status = corev1.ConditionUnknown
			n.Status.Conditions[i].Reason = NodeStoppedReason
			n.Status.Conditions[i].Message = "aks-flex-node reset stopped the kubelet"
			n.Status.Conditions[i].LastTransitionTime = metav1.Now()
			if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
				return err
			}
			changed = true
		}
		return nil
	})
	if err != nil {
		return task.Result{Detail: fmt.Sprintf("Node %s not told: %v", t.nodeName, err)}, nil
	}
	if !changed {
		return task.Result{Detail: "Node " + t.nodeName + " not Ready already"}, nil
	}
	return task.Result{Changed: true, Detail: "Node " + t.nodeName + " Ready=Unknown"}, nil
}
