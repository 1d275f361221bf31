package cli

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// workerTree writes a rootfs that meets the contract but for the tools
// left out of it.
func workerTree(t *testing.T, without ...string) string {
	t.Helper()
	dir := t.TempDir()
	skip := map[string]bool{}
	for _, w := range without {
		skip[w] = true
	}
	files := map[string]string{
		"usr/lib/systemd/systemd": "init", "usr/bin/mount": "m", "usr/bin/umount": "u", "usr/bin/nsenter": "n",
		"usr/sbin/iptables": "i", "usr/sbin/ip": "ip", "usr/sbin/conntrack": "c", "usr/sbin/modprobe": "k",
		"etc/ssl/certs/ca-certificates.crt": "certs", "usr/lib/os-release": "ID=debian\n",
	}
	for rel, body := range files {
		if skip[filepath.Base(rel)] {
			continue
		}
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("../usr/lib/os-release", filepath.Join(dir, "etc/os-release"))
	os.Symlink("usr/sbin", filepath.Join(dir, "sbin"))
	return dir
}

// TestImageBuildFromRootfsAndCheck: image build --from-rootfs packs a
// tree; image check passes an image that meets the contract and names
// the missing item of one without iptables, exit 1.
func TestImageBuildFromRootfsAndCheck(t *testing.T) {
	out := filepath.Join(t.TempDir(), "good")
	if so, se, code := run(t, "image", "build", "--from-rootfs", workerTree(t), "--output-dir", out); code != 0 {
		t.Fatalf("build: %d\n%s%s", code, so, se)
	}
	so, se, code := run(t, "image", "check", out)
	if code != 0 || !strings.Contains(so, "meets the worker image contract (12 items)") || !strings.Contains(so, "platform linux/"+runtime.GOARCH) {
		t.Errorf("check good: %d\n%s%s", code, so, se)
	}

	bad := filepath.Join(t.TempDir(), "bad")
	if so, se, code := run(t, "image", "build", "--from-rootfs", workerTree(t, "iptables"), "--output-dir", bad); code != 0 {
		t.Fatalf("build: %d\n%s%s", code, so, se)
	}
	so, se, code = run(t, "image", "check", "oci-layout://"+bad+":worker")
	if code != 1 || !strings.Contains(so, "MISS  iptables") || !strings.Contains(se, "missing iptables\n") {
		t.Errorf("check without iptables: %d\n%s%s", code, so, se)
	}
	if _, se, code := run(t, "image", "check", "--arch", "s390x", out); code != 1 || !strings.Contains(se, "is for linux/"+runtime.GOARCH+", not linux/s390x") {
		t.Errorf("check for another arch: %d %s", code, se)
	}
	if _, _, code := run(t, "image", "build", "--output-dir", bad); code != 2 {
		t.Errorf("build without a spec: exit %d, want 2", code)
	}
}

// TestImagePush: image push puts a built image in a (loopback) registry
// and prints the digest-pinned reference, which image check then reads
// from the registry.
func TestImagePush(t *testing.T) {
	out := filepath.Join(t.TempDir(), "img")
	if so, se, code := run(t, "image", "build", "--from-rootfs", workerTree(t), "--output-dir", out); code != 0 {
		t.Fatalf("build: %d\n%s%s", code, so, se)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	so, se, code := run(t, "image", "push", out, "oci://"+host+"/aks/worker:v1")
	pinned, ok := strings.CutPrefix(strings.TrimSpace(so), "pushed "+out+" to ")
	if code != 0 || !ok || !strings.HasPrefix(pinned, host+"/aks/worker@sha256:") {
		t.Fatalf("push: %d\n%s%s", code, so, se)
	}
	if so, se, code := run(t, "image", "check", pinned); code != 0 || !strings.Contains(so, "meets the worker image contract") {
		t.Errorf("check %s: %d\n%s%s", pinned, code, so, se)
	}
	if _, _, code := run(t, "image", "push", out, host+"/aks/worker:v1"); code != ExitInvalid {
		t.Errorf("push to a reference without oci://: exit %d, want %d", code, ExitInvalid)
	}
	if _, se, code := run(t, "image", "push", out, "oci://"+host+"/aks/worker:v1", "--arch", "s390x"); code != 1 || !strings.Contains(se, "linux/s390x") {
		t.Errorf("push for another arch: %d %s", code, se)
	}
}
