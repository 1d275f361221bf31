package machineapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/test/fakeentra"
	"github.com/Azure/aks-flex-node/test/fakeimds"
)

// toServer sends every request to srv: IMDS's link-local address is not
// this test's to use, so the fake IMDS answers on loopback instead.
type toServer struct{ u *url.URL }

func (t toServer) RoundTrip(r *http.Request) (*http.Response, error) {
	r2 := r.Clone(r.Context())
	r2.URL.Scheme, r2.URL.Host = t.u.Scheme, t.u.Host
	return http.DefaultTransport.RoundTrip(r2)
}

// A managed identity's token comes from IMDS (minted by the tenant) and
// ARM accepts it; the Machine is created as that identity.
func TestManagedIdentityTokenFromIMDSRegistersTheMachine(t *testing.T) {
	e := newEnv(t)
	mi := fakeentra.NewGUID()
	e.tn.AddClient(fakeentra.Client{AppID: mi, ObjectID: fakeentra.NewGUID()})
	srv := httptest.NewServer(fakeimds.HandlerWithIdentity(nil, nil, &fakeimds.Identity{Minter: e.tn, UserAssigned: []string{mi}}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	spec := identity.Spec{Method: identity.MethodManagedIdentity, ClientID: mi}
	o := e.opts
	o.Tokens = &identity.Source{Spec: spec, Cache: &identity.Cache{Dir: t.TempDir()}, Options: identity.Options{HTTPClient: &http.Client{Transport: toServer{u}}}}
	o.Identity = spec.String()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Register(context.Background(), c, Want{Version: "1.35.0"})
	if err != nil || r.Outcome != Created {
		t.Fatalf("%+v %v", r, err)
	}
	for _, q := range e.arm.Requests() {
		if q.AppID != mi {
			t.Errorf("%s %s as %q, want the managed identity %s", q.Method, q.Path, q.AppID, mi)
		}
	}
}
