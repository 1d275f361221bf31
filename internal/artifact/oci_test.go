package artifact

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// testRegistry is go-containerregistry's registry on loopback. wrap, when
// set, sees every request first.
func testRegistry(t *testing.T, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func builtBundle(t *testing.T) string {
	t.Helper()
	legal := t.TempDir()
	put(t, legal, "LICENSE", []byte("MIT"))
	out := filepath.Join(t.TempDir(), "bundle")
	if _, _, err := build(t, BuildOptions{FromDir: srcTree(t), OutputDir: out, LegalDir: legal}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPushPullRoundTrip(t *testing.T) {
	ctx := context.Background()
	host := testRegistry(t, nil)
	dir := builtBundle(t)
	src := "oci://" + host + "/aks-flex/bootstrap-artifacts:k8s-" + testComponents.Kubernetes
	var r Registry
	d1, err := r.Push(ctx, dir, src)
	if err != nil {
		t.Fatal(err)
	}
	if d2, err := r.Push(ctx, dir, src); err != nil || d2 != d1 {
		t.Fatalf("second push: %s %v (first %s)", d2, err, d1)
	}

	rem, ps := r.Inspect(ctx, src, testComponents, runtime.GOARCH)
	if len(ps) > 0 {
		t.Fatal(Problems(ps))
	}
	if rem.Digest.String() != d1 {
		t.Errorf("inspect digest %s, pushed %s", rem.Digest, d1)
	}
	// Each payload's layer digest is its SHA-256 in manifest.json.
	for _, f := range rem.Manifest.Files {
		if l := rem.layers[f.Path]; l.Digest.Hex != f.SHA256 || l.MediaType != FileLayerType {
			t.Errorf("%s: layer %+v", f.Path, l)
		}
	}

	if ps := r.VerifyRemote(ctx, rem); len(ps) > 0 {
		t.Fatal(Problems(ps))
	}

	pulled := filepath.Join(t.TempDir(), "staged")
	n, err := r.Pull(ctx, rem, pulled)
	if err != nil {
		t.Fatal(err)
	}
	if ps := Verify(ctx, pulled, testComponents); len(ps) > 0 {
		t.Fatal(Problems(ps))
	}
	sa, sb := snapshot(t, dir), snapshot(t, pulled)
	if len(sa) != len(sb) {
		t.Errorf("pulled %d entries, built %d", len(sb), len(sa))
	}
	for p, v := range sa {
		if sb[p] != v {
			t.Errorf("%s differs after push and pull", p)
		}
	}
	// Present files are not downloaded again; a missing one is.
	if again, err := r.Pull(ctx, rem, pulled); err != nil || again != 0 {
		t.Fatalf("re-pull downloaded %d bytes, %v", again, err)
	}
	os.Remove(filepath.Join(pulled, kubeletPath(testComponents)))
	if again, err := r.Pull(ctx, rem, pulled); err != nil || again == 0 || again >= n {
		t.Fatalf("resume downloaded %d of %d bytes, %v", again, n, err)
	}

	// Inspect compares versions like Verify does.
	_, ps = r.Inspect(ctx, src, Components{Kubernetes: "1.34.0"}, runtime.GOARCH)
	if len(ps) != 1 || !strings.Contains(ps[0].Error(), "manifest kubernetes 1.35.0 != config components.kubernetes 1.34.0") {
		t.Fatalf("version mismatch: %v", ps)
	}
}

// tamper republishes the artifact at src as dst with one byte of kubelet
// changed: the layer is the tampered file, manifest.json is unchanged.
func tamper(t *testing.T, src, dst string) {
	t.Helper()
	ctx := context.Background()
	var r Registry
	rem, ps := r.Inspect(ctx, src, Components{}, "")
	if len(ps) > 0 {
		t.Fatal(Problems(ps))
	}
	desc, err := remote.Get(rem.Ref)
	if err != nil {
		t.Fatal(err)
	}
	var om v1.Manifest
	json.Unmarshal(desc.Manifest, &om)
	kubelet := kubeletPath(testComponents)
	body := []byte("kubelet " + testComponents.Kubernetes)
	body[0] ^= 1
	p := filepath.Join(t.TempDir(), "kubelet")
	os.WriteFile(p, body, 0o644)
	l := fileLayer{path: p, digest: sha256Hash(sumHex(body)), size: int64(len(body)), mediaType: FileLayerType}
	if err := remote.WriteLayer(rem.Ref.Context(), l); err != nil {
		t.Fatal(err)
	}
	for i := range om.Layers {
		if om.Layers[i].Annotations[titleAnnotation] == kubelet {
			om.Layers[i] = l.descriptor(kubelet)
		}
	}
	raw, _ := json.Marshal(om)
	ref, _ := r.ParseReference(dst)
	if err := remote.Put(ref, rawManifest{raw, types.OCIManifestSchema1}); err != nil {
		t.Fatal(err)
	}
}

func TestInspectTamperedLayer(t *testing.T) {
	ctx := context.Background()
	host := testRegistry(t, nil)
	src := "oci://" + host + "/b:good"
	var r Registry
	if _, err := r.Push(ctx, builtBundle(t), src); err != nil {
		t.Fatal(err)
	}
	tamper(t, src, "oci://"+host+"/b:bad")
	_, ps := pullVerified(ctx, r, "oci://"+host+"/b:bad", t.TempDir(), testComponents, runtime.GOARCH)
	if len(ps) != 1 || !strings.HasPrefix(ps[0].Error(), kubeletPath(testComponents)+": layer sha256:") {
		t.Fatalf("problems: %v", ps)
	}
}

// A registry that serves other bytes than the digest it names is caught
// while streaming, and the file is not kept.
func TestPullRejectsCorruptBlob(t *testing.T) {
	ctx := context.Background()
	dir := builtBundle(t)
	m, _ := LoadManifest(dir)
	kubeletSum := m.File(kubeletPath(testComponents)).SHA256
	var corrupt atomic.Bool
	host := testRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if corrupt.Load() && req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/blobs/sha256:"+kubeletSum) {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				b := rec.Body.Bytes()
				b[0] ^= 1
				w.WriteHeader(rec.Code)
				w.Write(b)
				return
			}
			h.ServeHTTP(w, req)
		})
	})
	src := "oci://" + host + "/b:v1"
	var r Registry
	if _, err := r.Push(ctx, dir, src); err != nil {
		t.Fatal(err)
	}
	corrupt.Store(true)
	rem, ps := r.Inspect(ctx, src, testComponents, runtime.GOARCH)
	if len(ps) > 0 {
		t.Fatal(Problems(ps)) // the index is fine; the bytes are not
	}
	if ps := r.VerifyRemote(ctx, rem); len(ps) != 1 || !strings.HasPrefix(ps[0].Error(), kubeletPath(testComponents)+": read from ") {
		t.Fatalf("verify remote: %v", ps)
	}
	staged := t.TempDir()
	_, ps = pullVerified(ctx, r, src, staged, testComponents, runtime.GOARCH)
	if len(ps) != 1 || !strings.Contains(ps[0].Error(), "pull "+kubeletPath(testComponents)) {
		t.Fatalf("problems: %v", ps)
	}
	if _, err := os.Stat(filepath.Join(staged, kubeletPath(testComponents))); !os.IsNotExist(err) {
		t.Fatalf("corrupt kubelet kept: %v", err)
	}
}

func TestPushRefusesTamperedBundle(t *testing.T) {
	host := testRegistry(t, nil)
	dir := builtBundle(t)
	p := filepath.Join(dir, kubeletPath(testComponents))
	b, _ := os.ReadFile(p)
	b[0] ^= 1
	os.WriteFile(p, b, 0o644)
	_, err := Registry{}.Push(context.Background(), dir, "oci://"+host+"/b:v1")
	if err == nil || !strings.Contains(err.Error(), kubeletPath(testComponents)+": sha256") {
		t.Fatalf("err = %v", err)
	}
	ref, _ := name.ParseReference(host + "/b:v1")
	if _, err := remote.Head(ref); err == nil {
		t.Fatal("tag exists after a refused push")
	}
}

// TestPlainHTTPOnlyLoopback: the bundle registry's transport policy
// allows plain HTTP to loopback, and to the reference's own registry only
// with PlainHTTP; refusals say how to allow it.
func TestPlainHTTPOnlyLoopback(t *testing.T) {
	for _, tc := range []struct {
		ref, url string
		plain    bool
		fail     bool
	}{
		{"10.1.2.3:5000/b:v1", "http://10.1.2.3:5000/v2/", false, true},
		{"10.1.2.3:5000/b:v1", "http://10.1.2.3:5000/v2/", true, false},
		{"10.1.2.3:5000/b:v1", "http://10.9.9.9:5000/v2/", true, true},
		{"registry.local/b:v1", "http://registry.local/v2/", false, true},
		{"10.1.2.3:5000/b:v1", "https://10.1.2.3:5000/v2/", false, false},
		{"127.0.0.1:5000/b:v1", "http://127.0.0.1:5000/v2/", false, false},
	} {
		ref, err := name.ParseReference(tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(tc.url)
		err = Registry{PlainHTTP: tc.plain}.policy(ref).Allow(u)
		if (err != nil) != tc.fail {
			t.Errorf("%s for %s plain=%v: err = %v", tc.url, tc.ref, tc.plain, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "plainHTTP") || !strings.Contains(err.Error(), "https")) {
			t.Errorf("error does not say how to allow it: %v", err)
		}
	}
	if _, err := (Registry{}).ParseReference("oci://127.0.0.1:5000/repo"); err == nil {
		t.Error("a reference without tag or digest was accepted")
	}
}

func TestPullImageArchive(t *testing.T) {
	host := testRegistry(t, nil)
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(host + "/library/busybox:1.36")
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "b")
	_, _, err = build(t, BuildOptions{OutputDir: out, Spec: &Spec{SchemaVersion: 1, Arch: runtime.GOARCH, Components: testComponents, Images: []Image{{Path: "images/busybox.tar", Ref: host + "/library/busybox:1.36"}}},
		Upstream: func() Upstream {
			srv, _ := fakeUpstream(t, testComponents, "")
			return Upstream{KubernetesURL: srv.URL, GitHubURL: srv.URL + "/gh"}
		}(),
		PullImage: Registry{}.PullImageArchive})
	if err != nil {
		t.Fatal(err)
	}
	if ps := Verify(context.Background(), out, testComponents); len(ps) > 0 {
		t.Fatal(Problems(ps))
	}
	// The archive is what docker save would write: ctr can import it.
	back, err := tarball.ImageFromPath(filepath.Join(out, "images/busybox.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if got, _ := back.Digest(); got != want {
		t.Errorf("archive image %s, pushed %s", got, want)
	}
}

// pullVerified is the registry path of start and `artifacts verify`:
// Inspect (no download if the artifact and its index disagree), Pull into
// dir, then verify the pulled bundle as a local one.
func pullVerified(ctx context.Context, r Registry, source, dir string, want Components, arch string) (*Remote, []Problem) {
	rem, ps := r.Inspect(ctx, source, want, arch)
	if len(ps) > 0 {
		return rem, ps
	}
	if _, err := r.Pull(ctx, rem, dir); err != nil {
		return rem, []Problem{{source, err.Error()}}
	}
	_, ps = verify(ctx, dir, want, arch)
	return rem, ps
}
