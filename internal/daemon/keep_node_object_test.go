package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/kubeclient/kubeclienttest"
)

func pod(name string, mod func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "acl-node-01"}}
	if mod != nil {
		mod(p)
	}
	return p
}

// evictingClient is a fake API server whose Eviction API deletes the pod
// and records it.
func evictingClient(objs ...runtime.Object) (*fake.Clientset, *[]string) {
	cs := fake.NewClientset(objs...)
	var evicted []string
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
		evicted = append(evicted, name)
		return true, nil, cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "default", name)
	})
	return cs, &evicted
}

// A Node deleted without the taint: the kubelet is restarted once (and
// not again while it registers), recorded as a repair; a Node that is
// there is left alone.
func TestNodeObjectReregisters(t *testing.T) {
	h := newDriftHost(t)
	cs, _ := evictingClient()
	k := &NodeObjectKeeper{Keeper: h.k, Client: func() (kubeclient.Interface, error) { return kubeclienttest.Wrap(cs), nil },
		Reset: func(context.Context) error { t.Fatal("reset of a Node without the taint"); return nil }}
	h.calls = nil
	if err := k.Keep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !h.inMachine("systemctl restart kubelet.service") {
		t.Fatalf("kubelet not restarted for a missing Node: %q", h.calls)
	}
	if r := strings.Join(h.repairs(t), "\n"); !strings.Contains(r, "node-reregistered: Node acl-node-01 was deleted without the") {
		t.Errorf("repairs: %s", r)
	}
	h.calls = nil
	if err := k.Keep(t.Context()); err != nil || h.inMachine("systemctl restart kubelet.service") {
		t.Errorf("restarted again within the grace (%v): %q", err, h.calls)
	}
	_, _ = cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "acl-node-01"}}, metav1.CreateOptions{})
	waitCached(t, k.Nodes, "acl-node-01") // the watch brings the registration
	k.lastRestart = k.lastRestart.Add(-reregisterGrace)
	h.calls = nil
	if err := k.Keep(t.Context()); err != nil || len(h.calls) != 0 {
		t.Errorf("a registered Node: %v %q", err, h.calls)
	}
}

// The deletion taint: the pods a drain evicts are evicted (a DaemonSet's
// and a mirror pod stay), then the reset starts, once.
func TestNodeObjectDeletionTaint(t *testing.T) {
	h := newDriftHost(t)
	yes := true
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "acl-node-01"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: DeletingTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}}}
	cs, evicted := evictingClient(n,
		pod("web-1", nil),
		pod("ds-1", func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ds", Controller: &yes}}
		}),
		pod("static-1", func(p *corev1.Pod) { p.Annotations = map[string]string{"kubernetes.io/config.mirror": "x"} }),
	)
	resets := 0
	k := &NodeObjectKeeper{Keeper: h.k, Client: func() (kubeclient.Interface, error) { return kubeclienttest.Wrap(cs), nil },
		Reset: func(context.Context) error { resets++; return nil }}
	if err := k.Keep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if strings.Join(*evicted, ",") != "web-1" || resets != 1 {
		t.Errorf("evicted %q, resets %d; want web-1 and one reset", *evicted, resets)
	}
	if err := k.Keep(t.Context()); err != nil || resets != 1 {
		t.Errorf("a second pass reset again (%v)", err)
	}
	for _, a := range cs.Actions() {
		if a.GetVerb() == "delete" && a.GetResource().Resource == "nodes" {
			t.Errorf("the agent deleted the Node: %v", a)
		}
	}
}

// waitCached waits for the informer to hold Node name.
func waitCached(t *testing.T, i *NodeInformer, name string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, ok := i.Node(name); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Node %s not in the informer's cache", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
