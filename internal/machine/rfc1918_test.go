package machine

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/Azure/aks-flex-node/test/netns"
)

// rfc1918Registry serves one registry (pkg/registry, in memory) with the
// test image pushed as aks/node:v1 on each of addrs (addresses on lo in
// the test's own network namespace) and on 127.0.0.1 for the push. It
// returns the registry host on each address and a count of the requests
// each of those listeners served.
func rfc1918Registry(t *testing.T, wrap func(http.Handler) http.Handler, addrs ...string) ([]string, []*atomic.Int32) {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	push := httptest.NewServer(reg)
	t.Cleanup(push.Close)
	r, err := name.ParseReference(strings.TrimPrefix(push.URL, "http://")+"/aks/node:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, baseImage(t)); err != nil {
		t.Fatal(err)
	}
	var hosts []string
	var hits []*atomic.Int32
	for _, a := range addrs {
		l, err := net.Listen("tcp", a+":0")
		if err != nil {
			t.Fatal(err)
		}
		n := &atomic.Int32{}
		var h http.Handler = reg
		if wrap != nil {
			h = wrap(reg)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1); h.ServeHTTP(w, r) })}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		hosts = append(hosts, l.Addr().String())
		hits = append(hits, n)
	}
	return hosts, hits
}

// TestProvisionRefusesPlainHTTPRegistryOnRFC1918: a registry on a
// private (RFC 1918) address that speaks only plain HTTP is refused
// without a word of HTTP exchanged, the refusal names https and the
// opt-in key, and nothing is written. go-containerregistry on its own
// pulls from it over plain HTTP (what main did).
func TestProvisionRefusesPlainHTTPRegistryOnRFC1918(t *testing.T) {
	if !netns.Enter(t, "10.213.0.1/32") {
		return
	}
	hosts, hits := rfc1918Registry(t, nil, "10.213.0.1")
	root := t.TempDir()
	_, err := Provision(context.Background(), at(root), "kube1", hosts[0]+"/aks/node:v1", nil)
	if err == nil {
		t.Fatalf("pulled %s/aks/node:v1 over plain HTTP (%d requests served)", hosts[0], hits[0].Load())
	}
	for _, want := range []string{"plain HTTP", hosts[0], "https", "bootstrap.ociImagePlainHTTP"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal does not name %q: %v", want, err)
		}
	}
	if n := hits[0].Load(); n != 0 {
		t.Errorf("the plain-HTTP registry served %d requests", n)
	}
	if _, err := os.Stat(at(root).OnRoot(at(root).MachinesDir())); err == nil {
		t.Error("the machines dir was created for a refused image")
	}
	t.Logf("refused: %v", err)
}
