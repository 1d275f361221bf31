package machineapi

import (
	"context"
	"crypto/x509"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/internal/transport"
	"github.com/Azure/aks-flex-node/test/fakearm"
	"github.com/Azure/aks-flex-node/test/fakeentra"
)

func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// clock is a fake clock that sleeping advances, so retry and poll
// budgets are tested without waiting; it records every wait.
type clock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

func (c *clock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// env is a fake Entra tenant, a fake ARM that checks its tokens, and a
// client for one Machine signing in as a service principal.
type env struct {
	tn    *fakeentra.Tenant
	arm   *fakearm.Server
	spec  identity.Spec
	src   *identity.Source
	clk   *clock
	id    MachineID
	opts  Options
	c     *Client
	appID string
}

const testSub = "6f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b"

func testID(name string) MachineID {
	return MachineID{Cluster: config.ClusterID{SubscriptionID: testSub, ResourceGroup: "flex-rg", Name: "flex-aks"}, Pool: "aksflexnodes", Name: name}
}

func newEnv(t testing.TB, edit ...func(*Options)) *env {
	t.Helper()
	tn := fakeentra.Start(t, listen(t))
	app := fakeentra.NewGUID()
	tn.AddClient(fakeentra.Client{AppID: app, ObjectID: fakeentra.NewGUID(), Secret: "s3cret-value"})
	arm := fakearm.Start(t, listen(t), fakearm.Options{Tokens: tn, APIVersions: []string{config.DefaultMachineAPIVersion}})
	spec := identity.Spec{Method: identity.MethodServicePrincipal, TenantID: tn.ID, ClientID: app, ClientSecret: "s3cret-value", AuthorityHost: tn.AuthorityHost, RootCAs: tn.CAPEM}
	src := &identity.Source{Spec: spec, Cache: &identity.Cache{Dir: t.TempDir()}}
	e := &env{tn: tn, arm: arm, spec: spec, src: src, clk: &clock{now: time.Unix(1_800_000_000, 0)}, id: testID("edge-01"), appID: app}
	endpoint, aud := Endpoint("AzurePublicCloud", arm.URL)
	e.opts = Options{ID: e.id, Endpoint: endpoint, Audience: aud, APIVersion: config.DefaultMachineAPIVersion, Tokens: src,
		Identity: spec.String(), HTTPClient: armHTTPClient(t, arm.CAPEM), Sleep: e.clk.Sleep, Now: e.clk.Now}
	for _, f := range edit {
		f(&e.opts)
	}
	c, err := New(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	return e
}

// armHTTPClient is the transport policy's client trusting the fake's CA.
func armHTTPClient(t testing.TB, caPEM []byte) *http.Client {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("fake ARM CA")
	}
	return transport.Policy{RootCAs: roots, Limits: Limits}.Client()
}
