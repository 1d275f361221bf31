package bootstrap

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/task"
)

var stageComponents = artifact.Components{Kubernetes: "1.35.4", Containerd: "1.6.20", Runc: "1.1.5", CNI: "1.1.1"}

// tgz is a gzipped tar of executables, by name.
func tgz(members ...string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, m := range members {
		tw.WriteHeader(&tar.Header{Name: m, Mode: 0o755, Size: int64(len(m)), Typeflag: tar.TypeReg})
		tw.Write([]byte(m))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// smallBundle builds a bundle with artifact.Build; contents are stand-ins
// that install.
func smallBundle(t *testing.T) string {
	t.Helper()
	return smallBundleAt(t, filepath.Join(t.TempDir(), "bundle"))
}

func smallBundleAt(t *testing.T, out string) string {
	t.Helper()
	src := t.TempDir()
	var img bytes.Buffer
	tw := tar.NewWriter(&img)
	tw.WriteHeader(&tar.Header{Name: "index.json", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	tw.Write([]byte("{}"))
	tw.Close()
	files := map[string][]byte{"images/pause.tar": img.Bytes()}
	for c, rel := range artifact.BundlePaths(stageComponents, runtime.GOARCH) {
		switch c {
		case artifact.Containerd:
			files[rel] = tgz("bin/containerd", "bin/ctr")
		case artifact.CNI:
			files[rel] = tgz("./bridge", "./loopback")
		default:
			files[rel] = []byte(c + " payload")
		}
	}
	for rel, b := range files {
		os.MkdirAll(filepath.Join(src, filepath.Dir(rel)), 0o755)
		os.WriteFile(filepath.Join(src, rel), b, 0o644)
	}
	_, err := artifact.Build(context.Background(), artifact.BuildOptions{
		Spec:    &artifact.Spec{SchemaVersion: 1, Arch: runtime.GOARCH, Components: stageComponents, Images: []artifact.Image{{Path: "images/pause.tar", Ref: "registry.k8s.io/pause:3.10"}}},
		FromDir: src, OutputDir: out,
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// stagePipeline is a pipeline on a temp root reading the bundle at source,
// logging at debug level into logs.
func stagePipeline(t *testing.T, source string, logs *bytes.Buffer) *Pipeline {
	t.Helper()
	root := t.TempDir()
	l, _ := layout.New(root, "/opt/aks-flex-node", "")
	c := &config.Config{}
	c.Components.Kubernetes, c.Components.Containerd, c.Components.Runc = "1.35.4", "1.6.20", "1.1.5"
	c.Networking.CNIVersion = "1.1.1"
	c.Bootstrap.OfflineArtifacts.Source = source
	p := &Pipeline{Layout: l, Config: c}
	if logs != nil {
		p.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p.init()
	return p
}

// flipByte changes one byte of p in place.
func flipByte(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1
	time.Sleep(20 * time.Millisecond) // past the kernel's coarse timestamp tick
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestStageOCI(t *testing.T) {
	ctx := context.Background()
	var blobGets atomic.Int32
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			blobGets.Add(1)
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	src := "oci://" + strings.TrimPrefix(srv.URL, "http://") + "/aks-flex/bootstrap-artifacts:k8s-{{ .KubernetesVersion }}"
	if _, err := (artifact.Registry{}).Push(ctx, smallBundle(t), strings.ReplaceAll(src, "{{ .KubernetesVersion }}", "1.35.4")); err != nil {
		t.Fatal(err)
	}

	p := stagePipeline(t, src, nil)
	l, c := p.Layout, p.Config
	stale := l.OnRoot(l.BundlesDir() + "/k8s-1.34.0")
	os.MkdirAll(stale, 0o755)

	dir, err := p.bundleDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(dir, l.OnRoot("/var/lib/aks-flex-node/bundles/oci-")) {
		t.Fatalf("staged at %s, want under the state dir", dir)
	}
	if ps := artifact.Verify(ctx, dir, stageComponents); len(ps) > 0 {
		t.Fatal(artifact.Problems(ps))
	}
	first := blobGets.Load()
	if first == 0 {
		t.Fatal("nothing downloaded")
	}
	// Same artifact digest: only the index is read again, no file.
	if again, err := p.bundleDir(ctx); err != nil || again != dir {
		t.Fatalf("second stage: %s %v", again, err)
	}
	if n := blobGets.Load() - first; n != 1 { // the bundle manifest (config blob)
		t.Errorf("second stage fetched %d blobs, want 1 (manifest.json)", n)
	}
	// A staged file corrupted on disk is caught at stage time (not at
	// install, after the host changed) and the bundle is pulled again.
	kubelet := filepath.Join(dir, artifact.BundlePaths(stageComponents, runtime.GOARCH)[artifact.Kubelet])
	flipByte(t, kubelet)
	before := blobGets.Load()
	if again, err := p.bundleDir(ctx); err != nil || again != dir {
		t.Fatalf("stage over a corrupted staged bundle: %s %v", again, err)
	}
	if ps := artifact.Verify(ctx, dir, stageComponents); len(ps) > 0 {
		t.Fatalf("corrupted staged bundle kept: %v", artifact.Problems(ps))
	}
	if blobGets.Load()-before < 2 {
		t.Errorf("corrupted staged bundle not pulled again")
	}
	if err := p.removeStaleBundles(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale staged bundle kept: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("current staged bundle removed: %v", err)
	}

	// A config asking for another version is refused before any download.
	c.Components.Kubernetes = "1.35.4"
	c.Components.Runc = "1.1.6"
	before = blobGets.Load()
	if _, err := p.bundleDir(ctx); err == nil || !strings.Contains(err.Error(), "manifest runc 1.1.5 != config components.runc 1.1.6") {
		t.Fatalf("err = %v", err)
	}
	if n := blobGets.Load() - before; n != 1 {
		t.Errorf("a refused stage fetched %d blobs", n)
	}
}

// stage-node-components is the gate for local bundles too: a tampered one
// fails there, naming the file, even when preflight's check was ignored.
func TestStageVerifiesLocalBundle(t *testing.T) {
	ctx := context.Background()
	p := stagePipeline(t, "/srv/bundle", nil)
	dir := smallBundleAt(t, p.Layout.OnRoot("/srv/bundle"))
	stage := p.stageComponentsTask()
	if res, err := stage.Do(ctx); err != nil || res.Detail != dir {
		t.Fatalf("good bundle: %+v %v", res, err)
	}
	rel := artifact.BundlePaths(stageComponents, runtime.GOARCH)[artifact.Kubelet]
	flipByte(t, filepath.Join(dir, rel))
	p.bundle = ""
	_, err := stage.Do(ctx)
	if err == nil || !strings.Contains(err.Error(), rel+": sha256") {
		t.Fatalf("tampered bundle staged: %v", err)
	}
	if p.bundle != "" {
		t.Errorf("a bundle that does not verify was handed to install: %s", p.bundle)
	}
}

// A first start hashes a local bundle once: preflight verifies it, then
// stage-node-components and install-node-components reuse that (the
// install itself still hashes what it copies).
func TestStartVerifiesBundleOnce(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	p := stagePipeline(t, "/srv/bundle", &logs)
	dir := smallBundleAt(t, p.Layout.OnRoot("/srv/bundle"))
	if err := os.MkdirAll(p.machineRoot(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := p.VerifyLocalBundle(ctx, dir); err != nil { // preflight
		t.Fatal(err)
	}
	for _, tk := range []task.Task{p.stageComponentsTask(), p.installComponentsTask()} {
		if _, err := tk.Do(ctx); err != nil {
			t.Fatalf("%s: %v", tk.Name(), err)
		}
	}
	if n := strings.Count(logs.String(), "verified bundle"); n != 1 {
		t.Errorf("bundle verified %d times, want 1:\n%s", n, logs.String())
	}
	if b, err := os.ReadFile(filepath.Join(p.machineRoot(), "usr/local/bin/containerd")); err != nil || string(b) != "bin/containerd" {
		t.Fatalf("installed containerd: %q %v", b, err)
	}
	// A converged re-run does not verify it again either.
	logs.Reset()
	p2 := stagePipeline(t, "/srv/bundle", &logs)
	p2.Layout = p.Layout
	if err := p2.VerifyLocalBundle(ctx, dir); err != nil {
		t.Fatal(err)
	}
	for _, tk := range []task.Task{p2.stageComponentsTask(), p2.installComponentsTask()} {
		if res, err := tk.Do(ctx); err != nil || res.Changed {
			t.Fatalf("%s on a converged host: %+v %v", tk.Name(), res, err)
		}
	}
	if n := strings.Count(logs.String(), "verified bundle"); n != 0 {
		t.Errorf("converged re-run verified the bundle %d times", n)
	}
	// A bundle file changed since the converged run breaks the stamp and
	// is verified again, and refused.
	p3 := stagePipeline(t, "/srv/bundle", nil)
	p3.Layout = p.Layout
	kubelet := filepath.Join(dir, artifact.BundlePaths(stageComponents, runtime.GOARCH)[artifact.Kubelet])
	flipByte(t, kubelet)
	if err := p3.VerifyLocalBundle(ctx, dir); err == nil {
		t.Fatal("tampered kubelet verified")
	}
}

// A registry bundle is hashed once on a first start (after the pull) and
// not at all on a converged re-run, though it is verified at stage time.
func TestStageOCIVerifiesOnce(t *testing.T) {
	ctx := context.Background()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(reg)
	defer srv.Close()
	src := "oci://" + strings.TrimPrefix(srv.URL, "http://") + "/aks-flex/bootstrap-artifacts:k8s-1.35.4"
	if _, err := (artifact.Registry{}).Push(ctx, smallBundle(t), src); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	p := stagePipeline(t, src, &logs)
	if err := os.MkdirAll(p.machineRoot(), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tk := range []task.Task{p.stageComponentsTask(), p.installComponentsTask()} {
		if _, err := tk.Do(ctx); err != nil {
			t.Fatalf("%s: %v", tk.Name(), err)
		}
	}
	if n := strings.Count(logs.String(), "verified bundle"); n != 1 {
		t.Errorf("first start verified the bundle %d times, want 1:\n%s", n, logs.String())
	}
	logs.Reset()
	p2 := stagePipeline(t, src, &logs)
	p2.Layout = p.Layout
	for _, tk := range []task.Task{p2.stageComponentsTask(), p2.installComponentsTask()} {
		if res, err := tk.Do(ctx); err != nil || res.Changed {
			t.Fatalf("%s on a converged host: %+v %v", tk.Name(), res, err)
		}
	}
	if n := strings.Count(logs.String(), "verified bundle"); n != 0 {
		t.Errorf("converged re-run verified the bundle %d times:\n%s", n, logs.String())
	}
}
