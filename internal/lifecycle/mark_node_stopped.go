package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/kubeclient"
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
	changed, err := t.mark(ctx, cs)
	if err != nil {
		return task.Result{Detail: fmt.Sprintf("Node %s not told: %v", t.nodeName, err)}, nil
	}
	if !changed {
		return task.Result{Detail: "Node " + t.nodeName + " not Ready already"}, nil
	}
	return task.Result{Changed: true, Detail: "Node " + t.nodeName + " Ready=Unknown"}, nil
}

// mark patches the Ready condition to Unknown (a strategic merge by the
// condition's type: the other conditions, and Ready's heartbeat, stay),
// unless it is Unknown already. A patch of nodes/status is what the
// node's credential may do (clusterprep's list).
func (t *markNodeStopped) mark(ctx context.Context, cs kubeclient.Interface) (bool, error) {
	// Fresh: the patch carries Ready's heartbeat as read, and a stale one
	// would move it back.
	n, err := cs.CoreV1().Nodes().Get(ctx, t.nodeName, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady || c.Status == corev1.ConditionUnknown {
			continue
		}
		patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: NodeStoppedReason,
			Message: "aks-flex-node reset stopped the kubelet", LastHeartbeatTime: c.LastHeartbeatTime, LastTransitionTime: metav1.Now(),
		}}}})
		if err != nil {
			return false, err
		}
		if _, err := cs.CoreV1().Nodes().Patch(ctx, t.nodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, nil
}
