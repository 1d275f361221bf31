package daemon

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// A cluster without the rollout CRD, or without a rollout, costs a pass
// one read of the rollouts from the watch cache and no campaign: no
// request for the lock.
func TestWriteRolloutStatusIdleWithoutRollouts(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"no CRD", ""},
		{"no rollout", `{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeRolloutList","metadata":{"resourceVersion":"5"},"items":[]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var requests []string
			var lock atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests = append(requests, r.Method+" "+r.URL.String())
				if strings.Contains(r.URL.Path, "flexnodeslots") {
					lock.Add(1)
				}
				if tc.body == "" || r.URL.Path != "/apis/flexnode.azure.com/v1alpha1/flexnoderollouts" {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(404)
					_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			w := &RolloutStatusWriter{NodeName: "n1", Log: slog.New(slog.DiscardHandler),
				Config: func() (*rest.Config, error) { return &rest.Config{Host: srv.URL}, nil }}
			if err := w.Term(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(requests) != 1 || !strings.Contains(requests[0], "resourceVersion=0") || lock.Load() != 0 {
				t.Errorf("requests %v", requests)
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
