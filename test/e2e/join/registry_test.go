package join

import (
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

// bundleRepo is where the e2e publishes the bundle, as the issue names it.
const bundleRepo = "aks-flex/bootstrap-artifacts"

// siteRegistry is go-containerregistry's registry (pkg/registry), serving
// one in-memory store on two loopback listeners: Outer on this machine's
// loopback (where `artifacts push` runs) and Inner on the test host's
// loopback, inside its network namespace, so that the host's config can
// say oci://127.0.0.1:PORT/... as a site registry on the node would be.
type siteRegistry struct {
	Outer, Inner string
}

func startRegistry(t *testing.T, netns string) *siteRegistry {
	t.Helper()
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	outer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inner, err := aclhost.ListenInNetNS(netns, "127.0.0.1:0")
	if err != nil {
		outer.Close()
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(outer) //nolint:errcheck // ends with Close
	go srv.Serve(inner) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })
	return &siteRegistry{Outer: outer.Addr().String(), Inner: inner.Addr().String()}
}

// publishBundle rebuilds the fixture bundle with the product's CLI
// (`artifacts build --from-dir`, the fixture bundle is laid out like the
// upstream tree), carrying the worker image in workerLayout (`--worker-image`),
// and pushes it with `artifacts push`. It returns the built bundle's
// directory.
func publishBundle(t *testing.T, agent, fixtureBundle, workerLayout string, m fixtures.Manifest, reg *siteRegistry) string {
	t.Helper()
	out := buildBundle(t, agent, fixtureBundle, workerLayout, m)
	cli := func(args ...string) string {
		t.Helper()
		start := time.Now()
		b, err := exec.Command(agent, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("aks-flex-node %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		t.Logf("aks-flex-node %s (%v): %s", args[1], time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(b)))
		return string(b)
	}
	cli("artifacts", "push", "--dir", out, "oci://"+reg.Outer+"/"+bundleRepo+":k8s-"+m.Components.Kubernetes)

	// A bundle with one byte of kubelet changed fails `artifacts verify`,
	// naming the file; the built bundle is restored afterwards.
	kubelet := filepath.Join(out, filepath.FromSlash(artifactPath(m, "kubelet")))
	flipByte(t, kubelet)
	b, err := exec.Command(agent, "artifacts", "verify", "--source", out, "--kubernetes-version", m.Components.Kubernetes).CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(b), kubelet+": sha256 ") {
		t.Errorf("artifacts verify of a tampered local bundle: exit %d, want 1 naming %s:\n%s", code, kubelet, b)
	}
	flipByte(t, kubelet)
	return out
}

func artifactPath(m fixtures.Manifest, component string) string {
	for _, f := range m.Files {
		if f.Component == component {
			return f.Path
		}
	}
	return ""
}

func flipByte(t *testing.T, p string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 4096); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x01
	if _, err := f.WriteAt(b, 4096); err != nil {
		t.Fatal(err)
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// publishTampered republishes tag as tag+"-tampered" with one byte of the
// kubelet changed: its layer is the tampered file, manifest.json (the
// config blob) still carries the good checksum. That is what a
// compromised or corrupted registry would serve.
func publishTampered(t *testing.T, reg *siteRegistry, bundleDir string, m fixtures.Manifest) string {
	t.Helper()
	src, err := name.ParseReference(reg.Outer+"/"+bundleRepo+":k8s-"+m.Components.Kubernetes, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(src)
	if err != nil {
		t.Fatal(err)
	}
	var om v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &om); err != nil {
		t.Fatal(err)
	}
	rel := artifactPath(m, "kubelet")
	body, err := os.ReadFile(filepath.Join(bundleDir, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	body[4096] ^= 0x01
	layer := static.NewLayer(body, om.Layers[0].MediaType)
	if err := remote.WriteLayer(src.Context(), layer); err != nil {
		t.Fatal(err)
	}
	d, _ := layer.Digest()
	replaced := false
	for i, l := range om.Layers {
		if l.Annotations["org.opencontainers.image.title"] == rel {
			om.Layers[i].Digest, om.Layers[i].Size = d, int64(len(body))
			replaced = true
		}
	}
	if !replaced {
		t.Fatalf("no layer titled %s", rel)
	}
	raw, _ := json.Marshal(om)
	tag := "k8s-" + m.Components.Kubernetes + "-tampered"
	if err := remote.Put(src.Context().Tag(tag), rawManifest(raw)); err != nil {
		t.Fatal(err)
	}
	return "oci://" + reg.Inner + "/" + bundleRepo + ":k8s-{{ .KubernetesVersion }}-tampered"
}

type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// tamperedCopy is dir with one byte of the kubelet changed: a hard-linked
// copy (cheap for 200 MB) whose kubelet is a rewritten file.
func tamperedCopy(t *testing.T, dir string, m fixtures.Manifest) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "tampered")
	if b, err := exec.Command("cp", "-al", dir, out).CombinedOutput(); err != nil {
		t.Fatalf("cp -al: %v\n%s", err, b)
	}
	kubelet := filepath.Join(out, filepath.FromSlash(artifactPath(m, "kubelet")))
	body, err := os.ReadFile(kubelet)
	if err != nil {
		t.Fatal(err)
	}
	body[4096] ^= 0x01
	if err := os.Remove(kubelet); err != nil { // break the hard link first
		t.Fatal(err)
	}
	if err := os.WriteFile(kubelet, body, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}
