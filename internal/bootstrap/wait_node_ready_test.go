package bootstrap

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// The kubelet's NotReady messages, as 1.35 writes them.
const (
	noCNIMessage = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
	twoErrors    = "[container runtime status check may not have completed yet, " + noCNIMessage + "]"
)

// nodeServer serves the Node n1 with its Ready condition.
func nodeServer(t *testing.T, status corev1.ConditionStatus, msg string) *rest.Config {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/nodes/n1" {
			http.NotFound(w, r)
			return
		}
		n := corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Message: msg}}}}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(n)
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}
}

// In networking.mode cluster, start's wait ends at a Node whose only
// reason for NotReady is the missing network config (the cluster's CNI
// DaemonSet comes to the registered node), and says so; in bridge mode,
// and with any other reason, it waits for Ready.
func TestPollNodeReadyClusterCNI(t *testing.T) {
	cases := []struct {
		name        string
		status      corev1.ConditionStatus
		msg         string
		clusterCNI  bool
		wantAwaited bool
		wantErr     bool
	}{
		{"ready", corev1.ConditionTrue, "kubelet is posting ready status", false, false, false},
		{"cluster mode, ready", corev1.ConditionTrue, "kubelet is posting ready status", true, false, false},
		{"cluster mode, no CNI config", corev1.ConditionFalse, noCNIMessage, true, true, false},
		{"bridge mode, no CNI config", corev1.ConditionFalse, noCNIMessage, false, false, true},
		{"cluster mode, another error too", corev1.ConditionFalse, twoErrors, true, false, true},
		{"cluster mode, another reason", corev1.ConditionFalse, "PLEG is not healthy: pleg was last seen active 3m0s ago", true, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			var seen []string
			awaited, err := pollNodeReady(ctx, nodeServer(t, c.status, c.msg), "n1", c.clusterCNI, func(s string) { seen = append(seen, s) })
			if awaited != c.wantAwaited || (err != nil) != c.wantErr {
				t.Fatalf("awaited %v, err %v; want awaited %v, error %v", awaited, err, c.wantAwaited, c.wantErr)
			}
			if c.wantErr && !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not say what was last seen (%q)", err, c.msg)
			}
		})
	}
}
