package kubeclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// apiServer answers as a kube-apiserver does on the paths the client
// uses, and records each request as "METHOD path?query body".
type apiServer struct {
	mu   sync.Mutex
	seen []string
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.seen = append(a.seen, fmt.Sprintf("%s %s?%s %s", r.Method, r.URL.Path, r.URL.RawQuery, body))
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	node := `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","resourceVersion":"7"}}`
	switch {
	case r.URL.Path == "/version":
		fmt.Fprint(w, `{"major":"1","minor":"35","gitVersion":"v1.35.4"}`)
	case r.URL.Path == "/api/v1/nodes/gone":
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"nodes \"gone\" not found","details":{"name":"gone","kind":"nodes"}}`)
	case r.URL.Path == "/api/v1/nodes/n1":
		fmt.Fprint(w, node)
	case r.URL.Path == "/api/v1/nodes" && r.URL.Query().Get("watch") == "true":
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, `{"type":"MODIFIED","object":%s}`+"\n", node)
	case r.URL.Path == "/api/v1/nodes":
		fmt.Fprintf(w, `{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":[%s]}`, node)
	case r.URL.Path == "/api/v1/pods":
		fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"p","namespace":"ns"}}]}`)
	case r.URL.Path == "/api/v1/namespaces/ns/pods/p/eviction":
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429,"message":"Cannot evict pod as it would violate the pod's disruption budget."}`)
	case strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/default/events"):
		fmt.Fprint(w, `{"kind":"Event","apiVersion":"v1","metadata":{"name":"e1","namespace":"default","resourceVersion":"3"},"count":2}`)
	default:
		http.NotFound(w, r)
	}
}

func (a *apiServer) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

func newClient(t *testing.T) (Interface, *apiServer) {
	t.Helper()
	a := &apiServer{}
	s := httptest.NewServer(a)
	t.Cleanup(s.Close)
	c, err := New(&rest.Config{Host: s.URL}, EventWrite)
	if err != nil {
		t.Fatal(err)
	}
	return c, a
}

func TestNodes(t *testing.T) {
	c, a := newClient(t)
	ctx := context.Background()
	n, err := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil || n.Name != "n1" || n.ResourceVersion != "7" {
		t.Fatalf("Get: %+v %v", n, err)
	}
	if _, err := c.CoreV1().Nodes().Get(ctx, "gone", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Get gone: %v, want NotFound", err)
	}
	l, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "a=b"})
	if err != nil || len(l.Items) != 1 || l.ResourceVersion != "9" {
		t.Fatalf("List: %+v %v", l, err)
	}
	p, err := c.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	if err != nil || p.Name != "n1" {
		t.Fatalf("Patch: %+v %v", p, err)
	}
	got := a.requests()
	want := []string{
		// The config's timeout goes to the server too; a list's is its
		// own TimeoutSeconds (none here), as in client-go.
		"GET /api/v1/nodes/n1?timeout=5s ",
		"GET /api/v1/nodes/gone?timeout=5s ",
		"GET /api/v1/nodes?labelSelector=a%3Db ",
		`PATCH /api/v1/nodes/n1?timeout=5s {"spec":{"unschedulable":true}}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestWatchNodes(t *testing.T) {
	c, a := newClient(t)
	secs := int64(30)
	w, err := c.CoreV1().Nodes().Watch(context.Background(), metav1.ListOptions{ResourceVersion: "9", TimeoutSeconds: &secs})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		n, ok := ev.Object.(*corev1.Node)
		if ev.Type != watch.Modified || !ok || n.Name != "n1" {
			t.Fatalf("event %v %T %+v", ev.Type, ev.Object, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event")
	}
	if got := a.requests()[0]; got != "GET /api/v1/nodes?resourceVersion=9&timeout=30s&timeoutSeconds=30&watch=true " {
		t.Fatalf("watch request %q", got)
	}
}

func TestPodsEvictionsEventsVersion(t *testing.T) {
	c, a := newClient(t)
	ctx := context.Background()
	pods, err := c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Namespace != "ns" {
		t.Fatalf("pods: %+v %v", pods, err)
	}
	err = c.PolicyV1().Evictions("ns").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}})
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evict: %v, want TooManyRequests (a budget)", err)
	}
	ev, err := c.CoreV1().Events("default").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: "default"}, Reason: "Joined"}, metav1.CreateOptions{})
	if err != nil || ev.Name != "e1" || ev.Count != 2 {
		t.Fatalf("create event: %+v %v", ev, err)
	}
	if _, err := c.CoreV1().Events("default").Patch(ctx, "e1", types.StrategicMergePatchType, []byte(`{"count":3}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := c.Discovery().ServerVersion()
	if err != nil || v.GitVersion != "v1.35.4" {
		t.Fatalf("version: %+v %v", v, err)
	}
	got := a.requests()
	if got[0] != "GET /api/v1/pods?fieldSelector=spec.nodeName%3Dn1 " {
		t.Errorf("pods request %q", got[0])
	}
	var evict map[string]any
	if m, b, _ := strings.Cut(got[1], " "); m != "POST" || !strings.HasPrefix(b, "/api/v1/namespaces/ns/pods/p/eviction?timeout=5s ") {
		t.Errorf("eviction request %q", got[1])
	} else if err := json.Unmarshal([]byte(strings.SplitN(b, " ", 2)[1]), &evict); err != nil || evict["apiVersion"] != "policy/v1" || evict["kind"] != "Eviction" {
		t.Errorf("eviction body %q (%v)", b, err)
	}
	if !strings.HasPrefix(got[2], "POST /api/v1/namespaces/default/events?timeout=5s ") || !strings.Contains(got[2], `"reason":"Joined"`) || !strings.Contains(got[2], `"kind":"Event"`) {
		t.Errorf("event create %q", got[2])
	}
	if got[3] != `PATCH /api/v1/namespaces/default/events/e1?timeout=5s {"count":3}` {
		t.Errorf("event patch %q", got[3])
	}
	if got[4] != "GET /version?timeout=5s " {
		t.Errorf("version request %q", got[4])
	}
}

// TestBinaryHasNoClientset fails when something the agent links brings
// back client-go's generated clientset (every API group registered at
// start, which the kubelet pays for each exec credential call).
func TestBinaryHasNoClientset(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/Azure/aks-flex-node/cmd/aks-flex-node").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list gave %d packages; not the binary's dependencies", len(deps))
	}
	for _, p := range deps {
		if p == "k8s.io/client-go/kubernetes" || strings.HasPrefix(p, "k8s.io/client-go/kubernetes/") || strings.HasSuffix(p, "/kubeclient/kubeclienttest") {
			t.Errorf("the agent links %s", p)
		}
	}
}
