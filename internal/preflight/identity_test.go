package preflight

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/clusterprep"
	"github.com/Azure/aks-flex-node/internal/identity"
)

const (
	testTenant = "11111111-2222-3333-4444-555555555555"
	testClient = "66666666-7777-8888-9999-000000000000"
	testOID    = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
	testSPSec  = "sp-secret-value-1234"
)

// fakeJWT is an unsigned token with the claims Entra puts in one.
func fakeJWT(claims map[string]any) string {
	c, _ := json.Marshal(claims)
	return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString(c) + ".c2ln"
}

// spHost is a host whose config signs in as a service principal, with
// the identity endpoint replaced by answer.
func spHost(t *testing.T, srv *fakeAPIServer, answer func(identity.Spec) (identity.Token, error)) (*fakeHost, string) {
	h := newHost(t)
	if srv != nil {
		h = hostFor(t, srv, certPEM(srv.Certificate()))
	}
	h.set("azure.bootstrapToken", nil)
	h.set("azure.servicePrincipal", map[string]any{"tenantId": testTenant, "clientId": testClient, "clientSecret": testSPSec})
	tok := fakeJWT(map[string]any{"tid": testTenant, "oid": testOID, "appid": testClient})
	h.fetch = func(_ context.Context, s identity.Spec) (identity.Token, error) {
		if answer != nil {
			return answer(s)
		}
		return identity.Token{AccessToken: tok, ExpiresOn: time.Now().Add(time.Hour)}, nil
	}
	return h, tok
}

func TestIdentityCheck(t *testing.T) {
	h, _ := spHost(t, nil, nil)
	want(t, h.run(NameIdentity), SeverityOK, "got a token for "+identity.AKSServerID, "tenant "+testTenant, "client "+testClient, "object "+testOID, "oauth2/v2.0/token")

	// The endpoint's own answer is quoted, with what to do about it.
	bad, _ := spHost(t, nil, func(s identity.Spec) (identity.Token, error) {
		return identity.Token{}, &identity.FetchError{Spec: s, Code: "AADSTS7000215", Detail: "HTTP 401 from https://login.microsoftonline.com/x/oauth2/v2.0/token: invalid_client: AADSTS7000215: Invalid client secret provided."}
	})
	r := bad.run(NameIdentity)
	want(t, r, SeverityError, "AADSTS7000215: Invalid client secret provided", "tenant "+testTenant, "client "+testClient)
	if !strings.Contains(r.Remedy, "azure.servicePrincipal.clientSecret") || strings.Contains(r.Message+r.Remedy, testSPSec) {
		t.Errorf("remedy or secret: %+v", r)
	}

	// A bootstrap token is no identity.
	want(t, newHost(t).run(NameIdentity), SeverityOK, "not configured")
}

func TestIdentityCheckRefusesLooseFiles(t *testing.T) {
	// A certificate others can read is refused before any request.
	h, _ := spHost(t, nil, func(identity.Spec) (identity.Token, error) {
		t.Error("asked the endpoint with a loose certificate file")
		return identity.Token{}, nil
	})
	h.set("azure.servicePrincipal", map[string]any{"tenantId": testTenant, "clientId": testClient, "clientCertificatePath": "/etc/aks-flex-node/sp.pem"})
	h.file("etc/aks-flex-node/sp.pem", "-----BEGIN CERTIFICATE-----\n")
	if err := os.Chmod(filepath.Join(h.root, "etc/aks-flex-node/sp.pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	want(t, h.run(NameIdentity), SeverityError, "/etc/aks-flex-node/sp.pem has mode 0644", "mode 0600 and owned by root")

	// So is a config holding a client secret that others can read.
	s, _ := spHost(t, nil, nil)
	env := s.env()
	if err := os.Chmod(s.configFile(), 0o640); err != nil {
		t.Fatal(err)
	}
	want(t, runNamed(t, env, NameIdentity), SeverityError, "azure.servicePrincipal.clientSecret is in", "has mode 0640")
}

func TestClusterAccess(t *testing.T) {
	srv := newFakeAPIServer(t)

	// A bootstrap token that may bootstrap, then one whose CSRs nobody
	// approves.
	h := hostFor(t, srv, certPEM(srv.Certificate()))
	want(t, h.run(NameClusterAccess), SeverityOK, "bootstrap token abcdef", "system:bootstrap:abcdef", "may do all 3")
	srv.set(func(f *fakeAPIServer) {
		f.denied = map[string]bool{"create certificatesigningrequests.certificates.k8s.io/nodeclient": true}
	})
	r := h.run(NameClusterAccess)
	want(t, r, SeverityError, "may not create certificatesigningrequests.certificates.k8s.io/nodeclient")
	if !strings.Contains(r.Remedy, "cluster prepare --bootstrap-token") || strings.Contains(r.Message+r.Remedy, testSecret) {
		t.Errorf("remedy or secret: %+v", r)
	}

	// An identity the cluster knows, with the TLS bootstrap's RBAC and
	// nothing more, then without it.
	id, tok := spHost(t, srv, nil)
	beyond := beyondBootstrapSet()
	srv.set(func(f *fakeAPIServer) { f.bearer, f.username, f.denied = tok, testOID, beyond })
	want(t, id.run(NameClusterAccess), SeverityOK, "service principal", `as "`+testOID+`"`, "may do all 3 things the kubelet's TLS bootstrap needs", "none of 5")
	srv.set(func(f *fakeAPIServer) {
		f.denied = beyondBootstrapSet()
		f.denied["create certificatesigningrequests.certificates.k8s.io/nodeclient"] = true
	})
	r = id.run(NameClusterAccess)
	want(t, r, SeverityError, "may not create certificatesigningrequests.certificates.k8s.io/nodeclient")
	if !strings.Contains(r.Remedy, "cluster prepare --identity "+testOID+" | kubectl apply -f -") {
		t.Errorf("remedy %q", r.Remedy)
	}
	// The agent's kube-proxy signs in as the node, not as the identity:
	// it asks the identity for nothing more.
	id.set("networking.kubeProxy", "agent")
	srv.set(func(f *fakeAPIServer) { f.denied = beyond })
	want(t, id.run(NameClusterAccess), SeverityOK, "may do all 3")
	id.set("networking.kubeProxy", "daemonset")

	// Unknown to the cluster: 401.
	srv.set(func(f *fakeAPIServer) { f.review = 401 })
	want(t, id.run(NameClusterAccess), SeverityError, "rejected", "does not authenticate it")
}

// beyondBootstrapSet is every clusterprep.BeyondBootstrap permission, as
// the fake API server's denied set.
func beyondBootstrapSet() map[string]bool {
	m := map[string]bool{}
	for _, p := range clusterprep.BeyondBootstrap {
		m[p.String()] = true
	}
	return m
}

// TestIdentityNodeIsOnlyANode (issue 26 item 1): an identity allowed more
// than the TLS bootstrap, as an earlier version's binding to system:node
// allowed it cluster-wide, is refused before the host changes, each
// excess named, with how to remove it.
func TestIdentityNodeIsOnlyANode(t *testing.T) {
	srv := newFakeAPIServer(t)
	id, tok := spHost(t, srv, nil)
	srv.set(func(f *fakeAPIServer) { f.bearer, f.username, f.denied = tok, testOID, nil })
	r := id.run(NameClusterAccess)
	want(t, r, SeverityError, "may get secrets in kube-system, create serviceaccounts/token in kube-system, create pods in kube-system, patch nodes/status, patch nodes", "more than a node may")
	if !strings.Contains(r.Remedy, "kubectl delete clusterrolebinding aks-flex-node:node:"+testOID) {
		t.Errorf("remedy %q", r.Remedy)
	}
	for _, p := range clusterprep.BeyondBootstrap {
		srv.set(func(f *fakeAPIServer) { f.denied = beyondBootstrapSet(); delete(f.denied, p.String()) })
		want(t, id.run(NameClusterAccess), SeverityError, "may "+p.String()+": more than a node may")
	}
	srv.set(func(f *fakeAPIServer) { f.denied = beyondBootstrapSet() })
	want(t, id.run(NameClusterAccess), SeverityOK, "none of 5")
}
