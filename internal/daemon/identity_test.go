package daemon

import (
	"context"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/apiprobe"
	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/test/fakeentra"
)

// The agent's readiness with an Azure identity signs in as the identity
// the kubelet uses, through the shared cache: the API server must
// authenticate the token, and a second probe asks the tenant nothing.
func TestReadyAuthenticatesAsTheIdentity(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tn := fakeentra.Start(t, l)
	app := fakeentra.NewGUID()
	tn.AddClient(fakeentra.Client{AppID: app, ObjectID: "agent-oid", Secret: "daemon-secret-value"})
	src := &identity.Source{
		Spec:  identity.Spec{Method: identity.MethodServicePrincipal, TenantID: tn.ID, ClientID: app, ClientSecret: "daemon-secret-value", AuthorityHost: tn.AuthorityHost, RootCAs: tn.CAPEM},
		Cache: &identity.Cache{Dir: filepath.Join(t.TempDir(), "tokens")},
	}
	var accept atomic.Bool
	accept.Store(true)
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !accept.Load() || r.URL.Path != apiprobe.SelfSubjectReviewPath || !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ey") {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"status":{"userInfo":{"username":"agent-oid"}}}`))
	}))
	t.Cleanup(api.Close)
	client, err := apiprobe.New(api.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := authenticated(context.Background(), client, src); err != nil {
			t.Fatal(err)
		}
	}
	if n := tn.TokenRequests(); n != 1 {
		t.Errorf("two probes asked the tenant %d times, want 1", n)
	}
	accept.Store(false)
	if err := authenticated(context.Background(), client, src); err == nil || !strings.Contains(err.Error(), "rejected the token") || strings.Contains(err.Error(), "daemon-secret-value") {
		t.Errorf("rejected token: %v", err)
	}
}
