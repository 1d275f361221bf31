package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// A cluster without the rollout CRD costs a pass one list; one without a
// rollout a list and a watch, and no campaign (no request for the lock)
// until a rollout is created: then the agent campaigns.
func TestWriteRolloutStatusCampaignsOnlyForRollouts(t *testing.T) {
	const emptyList = `{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeRolloutList","metadata":{"resourceVersion":"5"},"items":[]}`
	const added = `{"type":"ADDED","object":{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeRollout","metadata":{"name":"r","resourceVersion":"6"},"spec":{"nodeSelector":{},"release":{"kubernetesVersion":"v1.35.4"}}}}`
	for _, tc := range []struct {
		name, list, watch string
		requests          []string // the first requests, in order
		campaigns         bool
	}{
		{"no CRD", "", "", []string{"GET flexnoderollouts resourceVersion=0"}, false},
		{"no rollout, the watch ends", emptyList, "", []string{"GET flexnoderollouts resourceVersion=0", "GET flexnoderollouts resourceVersion=5 watch"}, false},
		{"a rollout is created", emptyList, added, []string{"GET flexnoderollouts resourceVersion=0", "GET flexnoderollouts resourceVersion=5 watch", "GET flexnodeslots"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var requests []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				q := r.URL.Query()
				if r.URL.Path == "/api/v1/nodes" {
					return // the process's Node informer's, in parallel (404: it keeps trying)
				}
				desc := r.Method + " " + r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
				if strings.Contains(r.URL.Path, "flexnodeslots") {
					desc = r.Method + " flexnodeslots"
				} else if rv := q.Get("resourceVersion"); rv != "" {
					desc += " resourceVersion=" + rv
				}
				if q.Get("watch") == "true" {
					desc += " watch"
				}
				mu.Lock()
				requests = append(requests, desc)
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				switch {
				case r.URL.Path == "/apis/flexnode.azure.com/v1alpha1/flexnoderollouts" && q.Get("watch") == "true" && tc.list != "":
					_, _ = w.Write([]byte(tc.watch))
				case r.URL.Path == "/apis/flexnode.azure.com/v1alpha1/flexnoderollouts" && tc.list != "":
					_, _ = w.Write([]byte(tc.list))
				default:
					w.WriteHeader(404)
					_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
				}
			}))
			defer srv.Close()
			w := &RolloutStatusWriter{NodeName: "n1", Log: slog.New(slog.DiscardHandler), Nodes: testInformer(srv.URL),
				Config: func() (*rest.Config, error) { return &rest.Config{Host: srv.URL}, nil }}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := w.Term(ctx); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(requests) < len(tc.requests) || strings.Join(requests[:len(tc.requests)], "|") != strings.Join(tc.requests, "|") ||
				!tc.campaigns && len(requests) != len(tc.requests) {
				t.Errorf("requests %q, want %q first", requests, tc.requests)
			}
		})
	}
}

// Every agent whose config names an API server is a candidate.
func TestAgentIsAStatusWriterCandidate(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load("../../examples/acl-bootstrap-token.json")
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(c, l, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, lp := range a.Loops {
		if lp.Name == writeRolloutStatusLoop {
			n++
			if lp.Local {
				t.Error("the status writer runs before the API server is reachable")
			}
		}
	}
	if n != 1 {
		t.Errorf("%d %s loops, want 1", n, writeRolloutStatusLoop)
	}
}

// A cluster where `cluster prepare --fleet` was not applied answers a
// node's list of the rollouts with 403 (the authorizer answers before the
// resource is looked up) or 404: the loop passes (the agent stays healthy)
// and looks again only after its wait, not at every pass.
func TestWriteRolloutStatusWaitsOnAClusterWithoutTheFleet(t *testing.T) {
	for _, code := range []int{http.StatusForbidden, http.StatusNotFound} {
		var mu sync.Mutex
		lists := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			lists++
			mu.Unlock()
			// The audit log and API priority and fairness tell the
			// agents by it.
			if ua := r.Header.Get("User-Agent"); !strings.HasPrefix(ua, "aks-flex-node/") {
				t.Errorf("User-Agent %q, want aks-flex-node/<version>", ua)
			}
			reason := map[int]string{403: "Forbidden", 404: "NotFound"}[code]
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":%q,"code":%d}`, reason, code)
		}))
		w := &RolloutStatusWriter{NodeName: "n1", Log: slog.New(slog.DiscardHandler), Nodes: testInformer(srv.URL),
			Config: func() (*rest.Config, error) { return &rest.Config{Host: srv.URL}, nil }}
		for range 3 {
			if err := w.Term(context.Background()); err != nil {
				t.Fatalf("%d: pass: %v", code, err)
			}
		}
		srv.Close()
		if lists != 1 || w.noFleet.wait != time.Minute {
			t.Errorf("%d: %d lists in 3 passes, wait %v; want 1 list, then a 1m wait", code, lists, w.noFleet.wait)
		}
		w.noFleet.next = time.Now() // the wait is over
		if d := w.noFleet.absent(time.Now()); d != 2*time.Minute {
			t.Errorf("%d: the second wait is %v, want it doubled to 2m", code, d)
		}
	}
}

// testInformer is a Node informer over the server at host, as the node.
func testInformer(host string) *NodeInformer {
	return NewNodeInformer(func() (kubeclient.Interface, error) {
		return kubeclient.New(&rest.Config{Host: host}, kubeclient.Follow)
	}, "n1")
}
