package daemon

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The agent's loops share one informer: however many passes keep-pod-routes
// and keep-node-object make, the API server sees one list (from the watch
// cache) and watches, never a Get of the node's Node; a taint put on the
// node's own Node reaches keep-node-object through the watch.
func TestLoopsShareOneNodeInformer(t *testing.T) {
	self := flexNode("self", "192.168.50.10", "10.244.0.0/24")
	k, api, host := stubKeeper(t, 50*time.Millisecond, self, flexNode("a", "192.168.50.11", "10.244.1.0/24"))
	k.Nodes = NewNodeInformer(k.Client, "self")
	nk := &NodeObjectKeeper{Keeper: &MachineKeeper{Layout: k.Layout, Log: slog.New(slog.DiscardHandler)}, Nodes: k.Nodes, Client: k.Client}
	for range 3 {
		if err := k.Keep(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := nk.Keep(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	waitRoutes(t, host, "10.244.1.0/24 via 192.168.50.11 metric 217")
	tainted := self.DeepCopy()
	tainted.ResourceVersion = "102"
	tainted.Spec.Taints = []corev1.Taint{{Key: "example.com/drain", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	api.send(t, 0, `{"type":"MODIFIED","object":`+nodeJSON(tainted)+`}`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, ok := k.Nodes.Node("self")
		if ok && len(n.Spec.Taints) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the taint on the node's own Node did not reach the cache: %+v", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := nk.Keep(t.Context()); err != nil {
		t.Fatal(err)
	}
	lists, watches := api.requests()
	if len(lists) != 1 || lists[0].Get("resourceVersion") != "0" {
		t.Fatalf("lists %v, want one at resourceVersion 0 for both loops", lists)
	}
	if len(watches) != 1 {
		t.Errorf("%d watches, want 1 (one informer)", len(watches))
	}
	if got := api.otherRequests(); len(got) != 0 {
		t.Errorf("requests besides the list and watch: %v", got)
	}
}

// The informer keeps the node's own Node whole but for its managed fields
// and images (the loops read its taints, labels, conditions), and of the
// others only what the loops read (no taint, no kubelet condition).
func TestNodeInformerTransform(t *testing.T) {
	i := NewNodeInformer(nil, "self")
	n := flexNode("self", "192.168.50.10", "10.244.0.0/24")
	n.Labels = map[string]string{"pool": "edge"}
	n.Spec.Taints = []corev1.Taint{{Key: DeletingTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	n.Status.Images = []corev1.ContainerImage{{Names: []string{"img"}, SizeBytes: 1}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	got, err := i.transform(n)
	if err != nil {
		t.Fatal(err)
	}
	own := got.(*corev1.Node)
	if !deleting(own) || own.Labels["pool"] != "edge" || len(own.Status.Conditions) != 1 || own.ManagedFields != nil || own.Status.Images != nil {
		t.Errorf("own Node kept as %s", nodeJSON(own))
	}
	other := n.DeepCopy()
	other.Name = "a"
	got, err = i.transform(other)
	if err != nil {
		t.Fatal(err)
	}
	if s := nodeJSON(got.(*corev1.Node)); !strings.Contains(s, "pool") || strings.Contains(s, DeletingTaint) || strings.Contains(s, "Ready") {
		t.Errorf("another Node kept as %s", s)
	}
}
