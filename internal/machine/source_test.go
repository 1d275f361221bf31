package machine

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/Azure/aks-flex-node/internal/transport"
	"github.com/Azure/aks-flex-node/test/netns"
)

// TestPlainHTTPOptInCoversThatRegistryOnly: bootstrap.ociImagePlainHTTP
// lets the pull use plain HTTP to the configured registry, and Resolve
// says so and that the reference is a tag; a blob redirect from it to
// another plain-HTTP host is still refused.
func TestPlainHTTPOptInCoversThatRegistryOnly(t *testing.T) {
	// 192.0.2.1 (TEST-NET-1) stands for a public host; it exists on lo
	// in this namespace only.
	if !netns.Enter(t, "10.213.0.1/32", "10.213.0.2/32", "192.0.2.1/32") {
		return
	}
	ctx := context.Background()
	hosts, hits := rfc1918Registry(t, nil, "10.213.0.1")
	ref := hosts[0] + "/aks/node:v1"
	p := &Provisioner{PlainHTTP: true}
	r, err := p.Resolve(ctx, "/", ref)
	if err != nil {
		t.Fatal(err)
	}
	if !r.ByTag || r.PlainHTTP != PlainHTTPKey || r.Registry != hosts[0] || !strings.HasPrefix(r.Digest, "sha256:") {
		t.Errorf("Resolve = %+v", r)
	}
	root := t.TempDir()
	res, err := p.Provision(ctx, at(root), "kube1", ref, nil)
	if err != nil || !res.Changed || !strings.Contains(res.Detail, r.Digest) {
		t.Fatalf("with the opt-in: %+v %v", res, err)
	}
	if got := readFile(t, filepath.Join(Dir(at(root), "kube1"), "var/cache/new")); got != "n" {
		t.Errorf("var/cache/new = %q", got)
	}
	if hits[0].Load() == 0 {
		t.Error("no request reached the registry")
	}
	if d, _ := ImageDigest(at(root), "kube1"); d != r.Digest {
		t.Errorf("recorded digest %q, resolved %s", d, r.Digest)
	}

	// A registry that redirects blob downloads to another host over
	// plain HTTP: the opt-in names the registry, not where it sends us.
	// (go-containerregistry itself refuses redirects to private hosts, so
	// the other host is a public one.)
	public, _ := rfc1918Registry(t, nil, "192.0.2.1")
	redirect := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if strings.Contains(req.URL.Path, "/blobs/") && req.Method == http.MethodGet {
				http.Redirect(w, req, "http://"+public[0]+req.URL.Path, http.StatusTemporaryRedirect)
				return
			}
			h.ServeHTTP(w, req)
		})
	}
	redirecting, _ := rfc1918Registry(t, redirect, "10.213.0.2")
	_, err = (&Provisioner{PlainHTTP: true}).Provision(ctx, at(t.TempDir()), "kube1", redirecting[0]+"/aks/node:v1", nil)
	var re *transport.RefusedError
	if !errors.As(err, &re) || re.Host != public[0] {
		t.Fatalf("redirect to another plain-HTTP host: %v", err)
	}
}

func TestResolvePinnedAndLoopback(t *testing.T) {
	hosts, _ := rfc1918Registry(t, nil, "127.0.0.1")
	p := &Provisioner{}
	r, err := p.Resolve(context.Background(), "/", hosts[0]+"/aks/node:v1")
	if err != nil || r.PlainHTTP != "loopback" || !r.ByTag {
		t.Fatalf("%+v %v", r, err)
	}
	pinned, err := p.Resolve(context.Background(), "/", hosts[0]+"/aks/node@"+r.Digest)
	if err != nil || pinned.ByTag || pinned.Digest != r.Digest {
		t.Fatalf("%+v %v", pinned, err)
	}
}

// TestProvisionUnpacksWhatResolveResolved: preflight resolves the tag
// (with a context that ends with preflight); the tag then moves; Provision
// unpacks the digest preflight reported, fetched with its own context.
func TestProvisionUnpacksWhatResolveResolved(t *testing.T) {
	hosts, _ := rfc1918Registry(t, nil, "127.0.0.1")
	ref := hosts[0] + "/aks/node:v1"
	p := &Provisioner{}
	pctx, cancel := context.WithCancel(context.Background())
	r, err := p.Resolve(pctx, "/", ref)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	moved := imageOf(t, layerOf(t, file{name: "etc/"}, file{name: "etc/moved", body: "m"}))
	tag, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, moved); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	res, err := p.Provision(context.Background(), at(root), "kube1", ref, nil)
	if err != nil || !strings.Contains(res.Detail, r.Digest) {
		t.Fatalf("%+v %v", res, err)
	}
	if d, _ := ImageDigest(at(root), "kube1"); d != r.Digest {
		t.Errorf("unpacked %s, preflight resolved %s", d, r.Digest)
	}
	if got := readFile(t, filepath.Join(Dir(at(root), "kube1"), "var/cache/new")); got != "n" {
		t.Errorf("var/cache/new = %q: not the image preflight resolved", got)
	}
}
