package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/image"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// TestWorkerImageChoice: bootstrap.ociImage wins; else the bundle's
// image; else upstream's default for the host (its os-release and
// whether it has an NVIDIA device).
func TestWorkerImageChoice(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	l, err := layout.New(root, "", "")
	if err != nil {
		t.Fatal(err)
	}
	put := func(rel, body string) {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put("etc/os-release", "ID=ubuntu\nVERSION_ID=\"26.04\"\n")
	choose := func(c *config.Config) ImageChoice {
		t.Helper()
		s := NewStart(Options{Layout: l, Config: c})
		ch, err := s.image.Choose(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	if ch := choose(&config.Config{Bootstrap: config.Bootstrap{OCIImage: "reg.example/w@sha256:" + strings.Repeat("a", 64)}}); ch.Source != SourceConfig {
		t.Errorf("configured: %+v", ch)
	}
	if ch := choose(&config.Config{}); ch.Ref != image.UpstreamUbuntu2604 || !strings.Contains(ch.Source, "ubuntu2604, no GPU") {
		t.Errorf("no bundle, no GPU: %+v", ch)
	}
	put("dev/nvidia0", "")
	if ch := choose(&config.Config{}); ch.Ref != image.UpstreamUbuntu2604Nvidia {
		t.Errorf("no bundle, a GPU: %+v", ch)
	}

	// A local bundle that carries an image.
	digest := "sha256:" + strings.Repeat("b", 64)
	m := &artifact.Manifest{SchemaVersion: 1, Arch: "amd64", WorkerImage: &artifact.WorkerImage{Path: artifact.WorkerImageDir, Digest: digest, Tag: "worker"}}
	if err := os.MkdirAll(filepath.Join(root, "srv/bundle"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.WriteManifest(filepath.Join(root, "srv/bundle"), m); err != nil {
		t.Fatal(err)
	}
	c := &config.Config{Bootstrap: config.Bootstrap{OfflineArtifacts: config.OfflineArtifacts{Source: "/srv/bundle"}}}
	if ch := choose(c); ch.Source != SourceBundle || ch.Ref != "oci-layout:///srv/bundle/images/worker@"+digest || ch.Bundle == nil || !ch.Bundle.Staged {
		t.Errorf("bundle: %+v", ch)
	}
}
