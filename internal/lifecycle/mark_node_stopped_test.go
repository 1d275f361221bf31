package lifecycle

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/kubeclient/kubeclienttest"
)

// reset tells the API server the kubelet stopped: Ready becomes Unknown,
// the heartbeat stays the kubelet's; a second reset has nothing to tell,
// and a cluster it cannot reach does not fail it.
func TestMarkNodeStopped(t *testing.T) {
	hb := time.Now().Add(-time.Minute).Truncate(time.Second)
	node := readyNode(corev1.ConditionTrue, hb)
	node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse})
	cs := fake.NewClientset(node)
	client := &NodeClient{New: func() (kubeclient.Interface, error) { return kubeclienttest.Wrap(cs), nil }}
	res, err := MarkNodeStopped(client, "n1", time.Second).Do(t.Context())
	if err != nil || !res.Changed {
		t.Fatalf("mark: %+v %v", res, err)
	}
	n, _ := cs.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
	if len(n.Status.Conditions) != 2 {
		t.Fatalf("conditions after reset: %+v", n.Status.Conditions)
	}
	for _, c := range n.Status.Conditions {
		switch {
		case c.Type == corev1.NodeMemoryPressure && c.Status != corev1.ConditionFalse:
			t.Errorf("MemoryPressure after reset: %+v", c)
		case c.Type == corev1.NodeReady && (c.Status != corev1.ConditionUnknown || c.Reason != NodeStoppedReason || !c.LastHeartbeatTime.Time.Equal(hb)):
			t.Errorf("Ready after reset: %+v", c)
		}
	}
	if res, err := MarkNodeStopped(client, "n1", time.Second).Do(t.Context()); err != nil || res.Changed {
		t.Errorf("second mark: %+v %v", res, err)
	}
	gone := &NodeClient{New: func() (kubeclient.Interface, error) { return nil, errors.New("no credential") }}
	if res, err := MarkNodeStopped(gone, "n1", time.Second).Do(t.Context()); err != nil || res.Changed || !strings.Contains(res.Detail, "no credential") {
		t.Errorf("without a client: %+v %v", res, err)
	}
	if res, err := MarkNodeStopped(nil, "", time.Second).Do(t.Context()); err != nil || res.Changed {
		t.Errorf("never joined: %+v %v", res, err)
	}
}
