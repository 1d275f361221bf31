package fleet

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// A stub API server that records each request's method, path and query
// and answers with one rollout: enough to see that each method reaches
// the path and verb the API server serves the resource at.
func TestRolloutsSpeakTheResourcePaths(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	ro := v1alpha1.FlexNodeRollout{TypeMeta: metav1.TypeMeta{APIVersion: "flexnode.azure.com/v1alpha1", Kind: "FlexNodeRollout"},
		ObjectMeta: metav1.ObjectMeta{Name: "r1", ResourceVersion: "7"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		mu.Lock()
		seen = append(seen, req.Method+" "+req.URL.Path+"?"+req.URL.RawQuery+" "+strings.TrimSpace(string(body)))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case req.URL.Query().Get("watch") == "true":
			ev, _ := json.Marshal(map[string]any{"type": "ADDED", "object": ro})
			_, _ = w.Write(append(ev, '\n'))
		case req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/flexnoderollouts"):
			_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "flexnode.azure.com/v1alpha1", "kind": "FlexNodeRolloutList",
				"metadata": map[string]any{"resourceVersion": "9"}, "items": []any{ro}})
		default:
			_ = json.NewEncoder(w).Encode(ro)
		}
	}))
	defer srv.Close()
	r, err := NewRollouts(&rest.Config{Host: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := r.Get(ctx, "r1"); err != nil || got.Name != "r1" {
		t.Fatalf("Get = %v, %v", got, err)
	}
	if l, err := r.List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err != nil || len(l.Items) != 1 {
		t.Fatalf("List = %v, %v", l, err)
	}
	w, err := r.Watch(ctx, metav1.ListOptions{ResourceVersion: "9"})
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-w.ResultChan(); ev.Object.(*v1alpha1.FlexNodeRollout).Name != "r1" {
		t.Fatalf("watch event %v", ev)
	}
	w.Stop()
	if _, err := r.UpdateStatus(ctx, &ro); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Patch(ctx, "r1", types.MergePatchType, []byte(`{"spec":{"paused":true}}`)); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"GET /apis/flexnode.azure.com/v1alpha1/flexnoderollouts/r1? ",
		"GET /apis/flexnode.azure.com/v1alpha1/flexnoderollouts?resourceVersion=0 ",
		"GET /apis/flexnode.azure.com/v1alpha1/flexnoderollouts?resourceVersion=9&watch=true ",
		"PUT /apis/flexnode.azure.com/v1alpha1/flexnoderollouts/r1/status? ",
		`PATCH /apis/flexnode.azure.com/v1alpha1/flexnoderollouts/r1? {"spec":{"paused":true}}`,
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != len(want) {
		t.Fatalf("requests:\n%s", strings.Join(seen, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(seen[i], want[i]) {
			t.Errorf("request %d = %q, want prefix %q", i, seen[i], want[i])
		}
	}
}
