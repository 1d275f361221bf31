package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/network"
	"github.com/Azure/aks-flex-node/internal/state"
)

// nodeAPI answers the Node list and watch as a kube-apiserver does and
// records each: a list is the Nodes at version 100; a watch sends a
// bookmark at version 101 and then what the test sends on its stream,
// until the test ends it ("" is the server's timeout) or the client
// goes.
type nodeAPI struct {
	nodes []*corev1.Node

	mu      sync.Mutex
	lists   []url.Values
	watches []url.Values
	others  []string // any other request, by method and path
	streams []chan string
}

func (a *nodeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path != "/api/v1/nodes" {
		a.mu.Lock()
		a.others = append(a.others, r.Method+" "+r.URL.Path)
		a.mu.Unlock()
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	a.mu.Lock()
	if q.Get("watch") != "true" {
		a.lists = append(a.lists, q)
		a.mu.Unlock()
		items := make([]string, 0, len(a.nodes))
		for _, n := range a.nodes {
			items = append(items, nodeJSON(n))
		}
		fmt.Fprintf(w, `{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"100"},"items":[%s]}`, strings.Join(items, ","))
		return
	}
	a.watches = append(a.watches, q)
	stream := make(chan string, 10)
	a.streams = append(a.streams, stream)
	a.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	fmt.Fprintln(w, `{"type":"BOOKMARK","object":{"kind":"Node","apiVersion":"v1","metadata":{"resourceVersion":"101"}}}`)
	w.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case line := <-stream:
			if line == "" {
				return
			}
			fmt.Fprintln(w, line)
			w.(http.Flusher).Flush()
		}
	}
}

func nodeJSON(n *corev1.Node) string {
	c := n.DeepCopy()
	c.Kind, c.APIVersion = "Node", "v1"
	b, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// send writes line on the i-th watch (0 the first) once it is open.
func (a *nodeAPI) send(t *testing.T, i int, line string) {
	t.Helper()
	a.waitWatches(t, i+1)
	a.mu.Lock()
	s := a.streams[i]
	a.mu.Unlock()
	s <- line
}

func (a *nodeAPI) waitWatches(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		a.mu.Lock()
		got := len(a.watches)
		a.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d watches, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (a *nodeAPI) otherRequests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.others...)
}

func (a *nodeAPI) requests() (lists, watches []url.Values) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]url.Values(nil), a.lists...), append([]url.Values(nil), a.watches...)
}

// stubKeeper is a joined node "self" on 192.168.50.0/24 whose keeper
// talks to a stub API server through the product's own client.
func stubKeeper(t *testing.T, window time.Duration, nodes ...*corev1.Node) (*PodRouteKeeper, *nodeAPI, *podNetHost) {
	t.Helper()
	l := joinedLayout(t)
	if _, err := state.Open(l).SaveApplied(state.Applied{NodeName: "self", Machine: layout.MachineBlue}); err != nil {
		t.Fatal(err)
	}
	api := &nodeAPI{nodes: nodes}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	host := &podNetHost{routes: map[string]bool{}}
	k := &PodRouteKeeper{Layout: l, Log: slog.New(slog.DiscardHandler), Window: window, ClusterPodCIDR: "10.244.0.0/16",
		Client: func() (kubeclient.Interface, error) {
			return kubeclient.New(&rest.Config{Host: srv.URL}, kubeclient.Follow)
		},
		Net: network.Cleaner{Routes: network.Routes{Run: host.run}, HasNft: func() bool { return true }}}
	return k, api, host
}

func threeNodes() []*corev1.Node {
	return []*corev1.Node{flexNode("self", "192.168.50.10", "10.244.0.0/24"),
		flexNode("a", "192.168.50.11", "10.244.1.0/24"), flexNode("b", "192.168.50.12", "")}
}

// The Nodes are listed once, from the watch cache (resourceVersion=0),
// and then watched with bookmarks from the list's version; passes read
// the cache, and a watch the server ends is opened again from the last
// version seen (the bookmark's), never by listing again.
func TestPodRoutesListOnceFromWatchCache(t *testing.T) {
	k, api, host := stubKeeper(t, 50*time.Millisecond, threeNodes()...)
	for range 3 {
		if err := k.Keep(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	waitRoutes(t, host, "10.244.1.0/24 via 192.168.50.11 metric 217")
	api.send(t, 0, "") // the server's timeout
	api.waitWatches(t, 2)
	for range 3 {
		if err := k.Keep(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	lists, watches := api.requests()
	if len(lists) != 1 {
		t.Fatalf("%d lists after 6 passes and a watch timeout, want 1: %v", len(lists), lists)
	}
	if got := lists[0].Get("resourceVersion"); got != "0" {
		t.Errorf("the list asked for resourceVersion %q, want 0 (the watch cache)", got)
	}
	for i, want := range []string{"100", "101"} {
		w := watches[i]
		if w.Get("resourceVersion") != want || w.Get("allowWatchBookmarks") != "true" || w.Get("timeoutSeconds") == "" {
			t.Errorf("watch %d: %v, want resourceVersion=%s with bookmarks and a timeout", i, w, want)
		}
	}
}

// A watch whose version has expired (410 Gone, as the server says it: an
// ERROR event on the open watch) makes the cache list exactly once more,
// at the last version seen (from the watch cache, not etcd), and watch
// on from there.
func TestPodRoutesRelistOnlyOnGone(t *testing.T) {
	k, api, host := stubKeeper(t, 50*time.Millisecond, threeNodes()...)
	if err := k.Keep(t.Context()); err != nil {
		t.Fatal(err)
	}
	api.send(t, 0, `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old resource version: 101 (150)"}}`)
	api.waitWatches(t, 2)
	api.send(t, 1, "") // a timeout after the relist: no list
	api.waitWatches(t, 3)
	if err := k.Keep(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, host, "10.244.1.0/24 via 192.168.50.11 metric 217")
	lists, _ := api.requests()
	if len(lists) != 2 {
		t.Fatalf("%d lists, want 2 (the first and one after the 410): %v", len(lists), lists)
	}
	if got := lists[1].Get("resourceVersion"); got != "101" {
		t.Errorf("the relist asked for resourceVersion %q, want 101 (the last seen, from the watch cache)", got)
	}
}

// A Node changed or deleted reaches the routes through the open watch,
// within the pass, without a list.
func TestPodRoutesNodeChangeReachesRoutesWithoutList(t *testing.T) {
	k, api, host := stubKeeper(t, time.Minute, threeNodes()...)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- k.Keep(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("pass: %v", err)
		}
	}()
	waitRoutes(t, host, "10.244.1.0/24 via 192.168.50.11 metric 217")
	b := flexNode("b", "192.168.50.12", "10.244.2.0/24")
	b.ResourceVersion = "102"
	api.send(t, 0, `{"type":"MODIFIED","object":`+nodeJSON(b)+`}`)
	waitRoutes(t, host, "10.244.1.0/24 via 192.168.50.11 metric 217", "10.244.2.0/24 via 192.168.50.12 metric 217")
	a := flexNode("a", "192.168.50.11", "10.244.1.0/24")
	a.ResourceVersion = "103"
	api.send(t, 0, `{"type":"DELETED","object":`+nodeJSON(a)+`}`)
	waitRoutes(t, host, "10.244.2.0/24 via 192.168.50.12 metric 217")
	if lists, _ := api.requests(); len(lists) != 1 {
		t.Fatalf("%d lists, want 1", len(lists))
	}
}

// The cache keeps of another Node what the loops read (name, UID,
// version, pod CIDRs and InternalIPs for the routes; labels and the
// FlexNodeRelease condition for the rollouts) and nothing else.
func TestPodRoutesCacheKeepsOnlyWhatTheLoopsNeed(t *testing.T) {
	n := flexNode("a", "192.168.50.11", "10.244.1.0/24")
	n.UID, n.ResourceVersion = "u-1", "7"
	n.Labels = map[string]string{"kubernetes.io/hostname": "a"}
	n.Annotations = map[string]string{"big": strings.Repeat("x", 4096)}
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "a"})
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	fleet.SetNodeRelease(n, fleet.NodeRelease{Rollout: "edge-b", Generation: 2, Phase: fleet.PhaseUpdated}, time.Unix(1e9, 0))
	release := n.Status.Conditions[1]
	n.Status.Images = []corev1.ContainerImage{{Names: []string{"img"}, SizeBytes: 1}}
	n.Status.NodeInfo.BootID = "boot"
	n.Spec.Unschedulable = true
	got, err := peerNode(n)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "u-1", ResourceVersion: "7", Labels: n.Labels},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.50.11"}},
			Conditions: []corev1.NodeCondition{release}}}
	if nodeJSON(got.(*corev1.Node)) != nodeJSON(want) {
		t.Fatalf("kept %s\nwant %s", nodeJSON(got.(*corev1.Node)), nodeJSON(want))
	}
	if r, ok, err := fleet.ReadNodeRelease(got.(*corev1.Node)); !ok || err != nil || r.Phase != fleet.PhaseUpdated {
		t.Errorf("the rollouts read %+v %v %v of the kept Node", r, ok, err)
	}
	if peerOf(got.(*corev1.Node)) != peerOf(n) {
		t.Fatalf("the routes read %+v of the kept Node, %+v of the Node", peerOf(got.(*corev1.Node)), peerOf(n))
	}
}
