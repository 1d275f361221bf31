package integration

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/test/aclhost"
)

// Verify once (issue 20): a bundle is hashed in full once and recorded;
// a start that finds it unchanged does not hash it again, and one byte
// of the kubelet changed in place, with its size and mtime kept (only
// its ctime moves), is caught on the next run, naming the file.

// startIgnoring are the checks a start on this host fails by design
// (no API server, no worker image): the ones under test still count.
const startIgnoring = "--ignore-preflight-errors=api-server-reachable,bootstrap-token,worker-image"

// tamperInPlace changes one byte of p (a host path) in place and puts its
// mtime back with touch -r, as someone hiding the change would; the test
// checks that only the ctime moved.
func tamperInPlace(t *testing.T, h *aclhost.Host, p string) {
	t.Helper()
	before, err := os.Stat(h.Path(p))
	must(t, err)
	time.Sleep(20 * time.Millisecond) // past the kernel's coarse timestamp tick
	h.RunOK(t, "sh", "-c", `touch -r "$1" /tmp/mtime-ref && printf X | dd of="$1" bs=1 seek=3 conv=notrunc status=none && touch -r /tmp/mtime-ref "$1"`, "sh", p)
	after, err := os.Stat(h.Path(p))
	must(t, err)
	bc, ac := before.Sys().(*syscall.Stat_t).Ctim, after.Sys().(*syscall.Stat_t).Ctim
	if after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) || bc == ac {
		t.Fatalf("tamper of %s: size %d -> %d, mtime %v -> %v, ctime %v -> %v: want only the ctime to move",
			p, before.Size(), after.Size(), before.ModTime(), after.ModTime(), bc, ac)
	}
}

// quickVerify runs `artifacts verify --quick` with the host's config.
func quickVerify(t *testing.T, h *aclhost.Host) (out string, code int) {
	t.Helper()
	stdout, stderr, code := runBounded(t, h, time.Minute, aclPrefix+"/bin/aks-flex-node", "artifacts", "verify", "--quick", "--config", "/etc/aks-flex-node/config.json")
	return stdout + stderr, code
}

// TestVerifyOnceLocalBundle: a local bundle is hashed by the first start
// ("verified now") and not by the next ("verified (unchanged since"),
// nor by `artifacts verify --quick` (0 bytes hashed); after the kubelet
// is tampered with in place, --quick and the next start refuse, naming
// the kubelet.
func TestVerifyOnceLocalBundle(t *testing.T) {
	bundle := fakeBundle(t)
	h := installed(t, startConfig(t, "oci-layout:///root/images/none:none", "/root/bundle"))
	must(t, h.CopyIn(bundle, "/root/bundle", 0o755))
	agent := aclPrefix + "/bin/aks-flex-node"
	kubelet := "/root/bundle/" + artifact.BundlePaths(fakeComponents, runtime.GOARCH)[artifact.Kubelet]
	start := func() string {
		// The start gets past stage-node-components and stops at the
		// worker image, which does not exist: what is under test is done
		// by then.
		stdout, stderr, _ := runBounded(t, h, 2*time.Minute, agent, "start", "--config", "/etc/aks-flex-node/config.json", startIgnoring)
		return stdout + stderr
	}
	if out := start(); !strings.Contains(out, "files present, verified now") {
		t.Fatalf("first start: preflight did not verify the bundle now:\n%s", out)
	}
	if out := start(); !strings.Contains(out, "files present, verified (unchanged since ") {
		t.Errorf("second start: preflight did not find the bundle unchanged:\n%s", out)
	}
	if out, code := quickVerify(t, h); code != 0 || !strings.Contains(out, "verified (unchanged since ") || !strings.Contains(out, "(0 bytes hashed)") {
		t.Errorf("artifacts verify --quick on an unchanged bundle: exit %d\n%s", code, out)
	}
	rec, err := filepath.Glob(h.Path("/var/lib/aks-flex-node/verified/*.json"))
	must(t, err)
	if len(rec) != 1 {
		t.Fatalf("verification records: %v, want one", rec)
	}
	if fi, err := os.Stat(rec[0]); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("record %s: %v %v, want mode 0644", rec[0], fi.Mode(), err)
	}

	tamperInPlace(t, h, kubelet)
	if out, code := quickVerify(t, h); code != 1 || !strings.Contains(out, kubelet+": sha256") {
		t.Errorf("artifacts verify --quick after the tamper: exit %d, want 1 naming %s\n%s", code, kubelet, out)
	}
	out := start()
	if !strings.Contains(out, "[ERROR artifact-sources]") || !strings.Contains(out, kubelet+": sha256") || !strings.Contains(out, "refused before touching the host") {
		t.Errorf("start after the tamper: want a preflight refusal naming %s:\n%s", kubelet, out)
	}
}

// TestVerifyOnceStagedOCIBundle: a bundle pulled from a registry is
// staged and recorded; `artifacts verify --quick` then hashes nothing.
// After the staged kubelet is tampered with in place, --quick refuses
// naming it, and the next start catches it at stage-node-components,
// naming it, removes the staged copy and pulls it again (a staged copy
// is the agent's cache of the registry's artifact), so what is staged
// is the registry's kubelet again.
func TestVerifyOnceStagedOCIBundle(t *testing.T) {
	ctx := context.Background()
	bundle := fakeBundle(t)
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	push := httptest.NewServer(reg)
	defer push.Close()
	repo := "/aks/bundle:k8s-" + fakeComponents.Kubernetes
	_, err := artifact.Registry{PlainHTTP: true}.Push(ctx, bundle, "oci://"+strings.TrimPrefix(push.URL, "http://")+repo)
	must(t, err)

	h := prepare(t, aclhost.ACL, nil)
	peer := h.Peer(t, "10.213.0.9/30", "10.213.0.10/30")
	l, err := peer.Listen("5000")
	must(t, err)
	hits := serveCounted(t, l, nil, reg)
	cfg := withBootstrap(t, testConfig(t, aclPrefix), map[string]any{
		"ociImage":         "oci-layout:///root/images/none:none",
		"offlineArtifacts": map[string]any{"source": "oci://" + l.Addr().String() + "/aks/bundle:k8s-{{ .KubernetesVersion }}", "plainHTTP": true},
	})
	must(t, h.WriteFile("/etc/aks-flex-node/config.json", cfg, 0o600))
	h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node")
	agent := aclPrefix + "/bin/aks-flex-node"
	start := func() string {
		stdout, stderr, _ := runBounded(t, h, 2*time.Minute, agent, "start", "--config", "/etc/aks-flex-node/config.json", startIgnoring)
		return stdout + stderr
	}
	if out := start(); !strings.Contains(out, "pulled bundle") {
		t.Fatalf("first start did not pull the bundle:\n%s", out)
	}
	staged, err := filepath.Glob(h.Path("/var/lib/aks-flex-node/bundles/oci-*"))
	must(t, err)
	if len(staged) != 1 {
		t.Fatalf("staged bundles: %v", staged)
	}
	stagedDir := "/var/lib/aks-flex-node/bundles/" + filepath.Base(staged[0])
	if out, code := quickVerify(t, h); code != 0 || !strings.Contains(out, stagedDir+": verified (unchanged since ") || !strings.Contains(out, "(0 bytes hashed)") {
		t.Errorf("artifacts verify --quick on the staged bundle: exit %d\n%s", code, out)
	}

	kubelet := stagedDir + "/" + artifact.BundlePaths(fakeComponents, runtime.GOARCH)[artifact.Kubelet]
	good, err := os.ReadFile(h.Path(kubelet))
	must(t, err)
	tamperInPlace(t, h, kubelet)
	if out, code := quickVerify(t, h); code != 1 || !strings.Contains(out, kubelet+": sha256") {
		t.Errorf("artifacts verify --quick after the tamper: exit %d, want 1 naming %s\n%s", code, kubelet, out)
	}
	before := hits.Load()
	out := start()
	if !strings.Contains(out, "staged bundle no longer verifies") || !strings.Contains(out, kubelet+": sha256") || !strings.Contains(out, "pulled bundle") {
		t.Errorf("start after the tamper: want the staged kubelet named and the bundle pulled again:\n%s", out)
	}
	if hits.Load() == before {
		t.Error("start after the tamper made no registry request")
	}
	if b, err := os.ReadFile(h.Path(kubelet)); err != nil || string(b) != string(good) {
		t.Errorf("staged kubelet after the re-pull: %q %v, want the registry's %q", b, err, good)
	}
}
