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

// The repave's reads of the node's own Node that allow any version come
// from the informer, with no request; a fresh read, and another node's,
// go to the server.
func TestCachedReadsServeOnlyStaleAllowedReadsOfTheOwnNode(t *testing.T) {
	self := flexNode("self", "192.168.50.10", "10.244.0.0/24")
	self.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	k, api, _ := stubKeeper(t, 50*time.Millisecond, self, flexNode("a", "192.168.50.11", "10.244.1.0/24"))
	nodes := NewNodeInformer(k.Client, "self")
	nodes.Start(t.Context())
	if err := nodes.WaitSynced(t.Context(), "test", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	cs, err := k.Client()
	if err != nil {
		t.Fatal(err)
	}
	c := cachedReads{cs, nodes}.CoreV1().Nodes()
	for range 5 {
		n, err := c.Get(t.Context(), "self", metav1.GetOptions{ResourceVersion: "0"})
		if err != nil || !nodeReady(n) {
			t.Fatalf("own Node from the informer: %v %v", n, err)
		}
	}
	if got := api.otherRequests(); len(got) != 0 {
		t.Fatalf("stale-allowed reads of the own Node sent %v", got)
	}
	_, _ = c.Get(t.Context(), "self", metav1.GetOptions{})
	_, _ = c.Get(t.Context(), "a", metav1.GetOptions{ResourceVersion: "0"})
	if got := api.otherRequests(); len(got) != 2 {
		t.Errorf("a fresh read and another node's read sent %v, want 2 requests", got)
	}
}
