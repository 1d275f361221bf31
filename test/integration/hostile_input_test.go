package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/test/aclhost"
)

// Hostile input through the real entry points, on the ACL-like host: a
// worker image and an offline bundle built to make the agent act outside
// the machine root or hang (issue 13). The helpers here build them on the
// build machine; the tests copy them in.

// fakeComponents are the config's default versions: the fake bundle
// matches a config that names none.
var fakeComponents = artifact.Components{
	Kubernetes: config.DefaultKubernetesVersion,
	Containerd: config.DefaultContainerdVersion,
	Runc:       config.DefaultRuncVersion,
	CNI:        config.DefaultCNIVersion,
}

type tarMember struct {
	hdr  tar.Header
	body string
}

func tarStream(t *testing.T, members ...tarMember) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range members {
		h := m.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(m.body))
		}
		must(t, tw.WriteHeader(&h))
		_, err := tw.Write([]byte(m.body))
		must(t, err)
	}
	must(t, tw.Close())
	return buf.Bytes()
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	must(t, err)
	must(t, zw.Close())
	return buf.Bytes()
}

func exe(name string) tarMember {
	return tarMember{tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o755}, "#!/bin/sh\nexit 0\n"}
}

// fakeBundle writes an offline bundle that verifies for fakeComponents
// (scripts in place of the binaries: nothing runs them before the
// machine starts) and returns its directory on the build machine.
func fakeBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	p := artifact.BundlePaths(fakeComponents, runtime.GOARCH)
	files := map[string][]byte{
		p[artifact.Kubelet]:    []byte("#!/bin/sh\nexit 0\n"),
		p[artifact.Kubectl]:    []byte("#!/bin/sh\nexit 0\n"),
		p[artifact.Runc]:       []byte("#!/bin/sh\nexit 0\n"),
		p[artifact.Containerd]: gzipped(t, tarStream(t, exe("bin/containerd"), exe("bin/ctr"))),
		p[artifact.CNI]:        gzipped(t, tarStream(t, exe("bridge"), exe("loopback"))),
	}
	for rel, b := range files {
		must(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755))
		must(t, os.WriteFile(filepath.Join(dir, rel), b, 0o644))
	}
	m, err := artifact.BuildManifest(context.Background(), dir, runtime.GOARCH, fakeComponents, nil)
	must(t, err)
	_, err = artifact.WriteManifest(dir, m)
	must(t, err)
	return dir
}

// imageLayout writes img as an OCI layout tagged "hostile" and returns its
// directory on the build machine.
func imageLayout(t *testing.T, layerTar []byte, badDiffID bool) string {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil })
	must(t, err)
	img, err := mutate.AppendLayers(empty.Image, l)
	must(t, err)
	if badDiffID {
		// The config vouches for another layer: the digest chain does not
		// cover this one, so nothing of it may take effect.
		cfg, err := img.ConfigFile()
		must(t, err)
		cfg = cfg.DeepCopy()
		cfg.RootFS.DiffIDs[0] = v1.Hash{Algorithm: "sha256", Hex: "ab" + string(bytes.Repeat([]byte("cd"), 31))}
		img, err = mutate.ConfigFile(img, cfg)
		must(t, err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	lp, err := layout.Write(dir, empty.Index)
	must(t, err)
	must(t, lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "hostile"})))
	return dir
}

// startConfig is testConfig with a worker image and an offline bundle.
func startConfig(t *testing.T, image, bundle string) []byte {
	t.Helper()
	var c map[string]any
	must(t, json.Unmarshal(testConfig(t, aclPrefix), &c))
	c["bootstrap"] = map[string]any{"ociImage": image, "offlineArtifacts": map[string]any{"source": bundle}}
	b, err := json.MarshalIndent(c, "", "  ")
	must(t, err)
	return b
}

// installed boots the ACL-like host with cfg and installs the agent under
// the prefix (start refuses without it).
func installed(t *testing.T, cfg []byte) *aclhost.Host {
	t.Helper()
	h := prepare(t, aclhost.ACL, cfg)
	h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node")
	return h
}

// runBounded runs args in the host and fails the test if they take longer
// than limit: the defects here were hangs.
func runBounded(t *testing.T, h *aclhost.Host, limit time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	stdout, stderr, err := h.Run(ctx, args...)
	if ctx.Err() != nil {
		t.Fatalf("%q did not return within %v:\n%s\n%s", args, limit, stdout, stderr)
	}
	t.Logf("%q: %v, exit %d", args, time.Since(start).Round(time.Millisecond), exitCode(err))
	return stdout, stderr, exitCode(err)
}
