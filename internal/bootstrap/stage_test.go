package bootstrap

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
)

var stageComponents = artifact.Components{Kubernetes: "1.35.4", Containerd: "1.6.20", Runc: "1.1.5", CNI: "1.1.1"}

// smallBundle builds a bundle with artifact.Build; contents are stand-ins.
func smallBundle(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	var img bytes.Buffer
	tw := tar.NewWriter(&img)
	tw.WriteHeader(&tar.Header{Name: "index.json", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	tw.Write([]byte("{}"))
	tw.Close()
	files := map[string][]byte{"images/pause.tar": img.Bytes()}
	for c, rel := range artifact.BundlePaths(stageComponents, runtime.GOARCH) {
		files[rel] = []byte(c + " payload")
	}
	for rel, b := range files {
		os.MkdirAll(filepath.Join(src, filepath.Dir(rel)), 0o755)
		os.WriteFile(filepath.Join(src, rel), b, 0o644)
	}
	out := filepath.Join(t.TempDir(), "bundle")
	_, err := artifact.Build(context.Background(), artifact.BuildOptions{
		Spec:    &artifact.Spec{SchemaVersion: 1, Arch: runtime.GOARCH, Components: stageComponents, Images: []artifact.Image{{Path: "images/pause.tar", Ref: "registry.k8s.io/pause:3.10"}}},
		FromDir: src, OutputDir: out,
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
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

	root := t.TempDir()
	l, _ := layout.New(root, "/opt/aks-flex-node", "")
	c := &config.Config{}
	c.Components.Kubernetes, c.Components.Containerd, c.Components.Runc = "1.35.4", "1.6.20", "1.1.5"
	c.Networking.CNIVersion = "1.1.1"
	c.Bootstrap.OfflineArtifacts.Source = src
	p := &Pipeline{Layout: l, Config: c}
	p.init()
	stale := l.OnRoot(bundlesDir + "/k8s-1.34.0")
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
	before := blobGets.Load()
	if _, err := p.bundleDir(ctx); err == nil || !strings.Contains(err.Error(), "manifest runc 1.1.5 != config components.runc 1.1.6") {
		t.Fatalf("err = %v", err)
	}
	if n := blobGets.Load() - before; n != 1 {
		t.Errorf("a refused stage fetched %d blobs", n)
	}
}
