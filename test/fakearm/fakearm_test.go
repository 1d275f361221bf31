package fakearm

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/test/fakeentra"
)

const (
	apiVersion = "2025-10-02-preview"
	pool       = "/subscriptions/6f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b/resourceGroups/rg/providers/Microsoft.ContainerService/managedClusters/c1/agentPools/aksflexnodes"
)

func listen(t *testing.T) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// setup is a fake ARM, a client trusting only its CA, and a token the
// tenant minted for its audience.
func setup(t *testing.T) (*Server, *http.Client, string) {
	tn := fakeentra.Start(t, listen(t))
	app := fakeentra.NewGUID()
	tn.AddClient(fakeentra.Client{AppID: app, ObjectID: fakeentra.NewGUID()})
	s := Start(t, listen(t), Options{Tokens: tn, APIVersions: []string{apiVersion}})
	tok, _, err := tn.Mint(app, s.Audience())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.CAPEM)
	return s, &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}, tok
}

func do(t *testing.T, c *http.Client, method, url, tok, body string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return resp, v
}

func code(v map[string]any) string {
	e, _ := v["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func TestFakeARMSpeaksTheErrorEnvelope(t *testing.T) {
	s, c, tok := setup(t)
	m := s.URL + pool + "/machines/m1"
	for _, tc := range []struct {
		url, tok string
		status   int
		code     string
	}{
		{m + "?api-version=" + apiVersion, "", http.StatusUnauthorized, "AuthenticationFailed"},
		{m + "?api-version=" + apiVersion, "not-a-jwt", http.StatusUnauthorized, "InvalidAuthenticationToken"},
		{m, tok, http.StatusBadRequest, "MissingApiVersionParameter"},
		{m + "?api-version=2019-01-01", tok, http.StatusBadRequest, "NoRegisteredProviderFound"},
		{m + "?api-version=" + apiVersion, tok, http.StatusNotFound, "NotFound"},
	} {
		resp, v := do(t, c, http.MethodGet, tc.url, tc.tok, "")
		if resp.StatusCode != tc.status || code(v) != tc.code {
			t.Errorf("%s (token %v): %d %v, want %d %s", tc.url, tc.tok != "", resp.StatusCode, v, tc.status, tc.code)
		}
	}
}

func TestFakeARMDeleteMachinesAndUpdate(t *testing.T) {
	s, c, tok := setup(t)
	id := pool + "/machines/m1"
	etag := s.SetMachine(id, map[string]any{"orchestratorVersion": "1.35.0"})
	next, ok := s.Update(id, func(k map[string]any) { k["nodeLabels"] = map[string]any{"a": "b"} })
	if !ok || next == etag {
		t.Fatalf("update: %v %q", ok, next)
	}
	_, v := do(t, c, http.MethodGet, s.URL+id+"?api-version="+apiVersion, tok, "")
	if p := v["properties"].(map[string]any); p["eTag"] != next || p["kubernetes"].(map[string]any)["nodeLabels"] == nil {
		t.Errorf("after update: %v", v)
	}
	resp, _ := do(t, c, http.MethodPost, s.URL+pool+"/deleteMachines?api-version="+apiVersion, tok, `{"machineNames":["m1"]}`)
	op := resp.Header.Get("Azure-AsyncOperation")
	if resp.StatusCode != http.StatusAccepted || op == "" || resp.Header.Get("Location") == "" {
		t.Fatalf("deleteMachines: %d %v", resp.StatusCode, resp.Header)
	}
	if _, v := do(t, c, http.MethodGet, op, tok, ""); v["status"] != "Succeeded" {
		t.Errorf("operation %v", v)
	}
	if s.Machine(id) != nil {
		t.Error("the Machine is still there")
	}
	resp, v = do(t, c, http.MethodPost, s.URL+pool+"/deleteMachines?api-version="+apiVersion, tok, `{"machineNames":["m1"]}`)
	if resp.StatusCode != http.StatusNotFound || code(v) != "NotFound" {
		t.Errorf("deleting it again: %d %v", resp.StatusCode, v)
	}
}
