package machine

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestRegistryBasicAuth: a loopback registry behind basic auth is pulled
// from with the Docker config's credentials, and without them the error
// says the registry wants credentials and where they are read from.
func TestRegistryBasicAuth(t *testing.T) {
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "node" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := host + "/aks/node:v1"
	dst, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img := baseImage(t)
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(dst, img, remote.WithAuth(&authn.Basic{Username: "node", Password: "s3cret"})); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Without credentials: refused, clearly.
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	t.Setenv("REGISTRY_AUTH_FILE", filepath.Join(t.TempDir(), "none.json"))
	_, err = (&Provisioner{Keychain: authn.DefaultKeychain}).Provision(ctx, at(t.TempDir()), "kube1", ref, nil)
	if err == nil || !strings.Contains(err.Error(), "wants credentials") || !strings.Contains(err.Error(), "config.json") {
		t.Fatalf("without credentials: %v", err)
	}

	// With them in the Docker config's auths.
	cfg := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte("node:s3cret"))
	if err := os.WriteFile(filepath.Join(cfg, "config.json"), []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, host, auth)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", cfg)
	root := t.TempDir()
	p := &Provisioner{Keychain: authn.DefaultKeychain}
	in, err := p.Inspect(ctx, at(root), ref)
	if err != nil || !in.PlatformOK() || len(in.Findings) == 0 {
		t.Fatalf("inspect with credentials: %+v %v", in, err)
	}
	if _, err := p.Provision(ctx, at(root), "kube1", ref, nil); err != nil {
		t.Fatalf("with credentials: %v", err)
	}
	if got := readFile(t, filepath.Join(Dir(at(root), "kube1"), "etc/os-release")); got != "ID=debian\n" {
		t.Errorf("os-release = %q", got)
	}
}
