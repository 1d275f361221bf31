package cli

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// artifactsSrc writes a --from-dir tree and a spec for it.
func artifactsSrc(t *testing.T) (src, spec string) {
	t.Helper()
	src = t.TempDir()
	arch := runtime.GOARCH
	var img bytes.Buffer
	tw := tar.NewWriter(&img)
	tw.WriteHeader(&tar.Header{Name: "manifest.json", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	tw.Write([]byte("[]"))
	tw.Close()
	for rel, body := range map[string][]byte{
		"kubernetes/v1.35.4/bin/linux/" + arch + "/kubelet":              []byte("kubelet"),
		"kubernetes/v1.35.4/bin/linux/" + arch + "/kubectl":              []byte("kubectl"),
		"containerd/v1.6.20/containerd-1.6.20-linux-" + arch + ".tar.gz": []byte("containerd"),
		"runc/v1.1.5/runc." + arch:                                       []byte("runc"),
		"cni-plugins/v1.1.1/cni-plugins-linux-" + arch + "-v1.1.1.tgz":   []byte("cni"),
		"images/pause.tar": img.Bytes(),
	} {
		p := filepath.Join(src, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	spec = filepath.Join(t.TempDir(), "spec.json")
	os.WriteFile(spec, []byte(`{"schemaVersion": 1, "components": {"kubernetes": "1.35.4", "containerd": "1.6.20", "runc": "1.1.5", "cni": "1.1.1"},
  "images": [{"path": "images/pause.tar", "ref": "registry.k8s.io/pause:3.10"}]}`), 0o644)
	return src, spec
}

func TestArtifactsBuildVerifyPush(t *testing.T) {
	src, spec := artifactsSrc(t)
	out := filepath.Join(t.TempDir(), "bundle")
	stdout, stderr, code := run(t, "artifacts", "build", "--manifest", spec, "--output-dir", out, "--from-dir", src)
	if code != 0 || !strings.Contains(stdout, "kubernetes 1.35.4") {
		t.Fatalf("build: %d\n%s%s", code, stdout, stderr)
	}
	if stdout, _, code := run(t, "artifacts", "verify", "--source", "file://"+out, "--kubernetes-version", "1.35.4"); code != 0 || !strings.Contains(stdout, "verified, 6 files") {
		t.Fatalf("verify: %d %s", code, stdout)
	}
	stdout, _, code = run(t, "artifacts", "verify", "--source", out, "--kubernetes-version", "1.34.0")
	if code != 1 || !strings.Contains(stdout, "manifest kubernetes 1.35.4 != config components.kubernetes 1.34.0") {
		t.Fatalf("version mismatch: %d %s", code, stdout)
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := "oci://" + strings.TrimPrefix(srv.URL, "http://") + "/aks-flex/bootstrap-artifacts:k8s-{{ .KubernetesVersion }}"
	pushRef := strings.ReplaceAll(ref, "{{ .KubernetesVersion }}", "1.35.4")
	if stdout, stderr, code := run(t, "artifacts", "push", "--dir", out, pushRef); code != 0 || !strings.Contains(stdout, "@sha256:") {
		t.Fatalf("push: %d %s %s", code, stdout, stderr)
	}
	if stdout, stderr, code := run(t, "artifacts", "verify", "--source", ref, "--kubernetes-version", "v1.35.4"); code != 0 {
		t.Fatalf("verify oci: %d %s %s", code, stdout, stderr)
	}

	// One byte changed in kubelet: one line naming it, exit 1.
	kubelet := filepath.Join(out, "kubernetes/v1.35.4/bin/linux", runtime.GOARCH, "kubelet")
	os.WriteFile(kubelet, []byte("kubelex"), 0o644)
	stdout, _, code = run(t, "artifacts", "verify", "--source", out)
	if lines := strings.Split(strings.TrimSpace(stdout), "\n"); code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], kubelet+": sha256 ") {
		t.Fatalf("tampered: %d %q", code, stdout)
	}
	if _, stderr, code := run(t, "artifacts", "push", "--dir", out, pushRef); code != 1 || !strings.Contains(stderr, kubelet) {
		t.Fatalf("push of a tampered bundle: %d %s", code, stderr)
	}
}

// --layout upstream writes upstream's layout from the same tree (plus
// kube-proxy and crictl); verify reads it, names a changed kubelet, and
// push refuses it, saying how to convert it.
func TestArtifactsUpstreamLayout(t *testing.T) {
	src, _ := artifactsSrc(t)
	arch := runtime.GOARCH
	for rel, body := range map[string]string{
		"kubernetes/v1.35.4/bin/linux/" + arch + "/kube-proxy":    "kube-proxy",
		"crictl/v1.35.0/crictl-v1.35.0-linux-" + arch + ".tar.gz": "crictl",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(src, rel)), 0o755)
		os.WriteFile(filepath.Join(src, rel), []byte(body), 0o644)
	}
	spec := filepath.Join(t.TempDir(), "spec.json")
	os.WriteFile(spec, []byte(`{"schemaVersion": 1, "components": {"kubernetes": "1.35.4", "containerd": "1.6.20", "runc": "1.1.5", "cni": "1.1.1", "crictl": "1.35.0"},
  "images": [{"path": "images/pause.tar", "ref": "registry.k8s.io/pause:3.10"}]}`), 0o644)
	out := filepath.Join(t.TempDir(), "upstream")
	stdout, stderr, code := run(t, "artifacts", "build", "--manifest", spec, "--output-dir", out, "--from-dir", src, "--layout", "upstream")
	if code != 0 || !strings.Contains(stdout, "8 files, 1 images, 0 legal files, upstream's layout") {
		t.Fatalf("build: %d\n%s%s", code, stdout, stderr)
	}
	if stdout, _, code := run(t, "artifacts", "verify", "--source", out, "--kubernetes-version", "1.35.4"); code != 0 || !strings.Contains(stdout, "verified, 8 files, upstream's layout") {
		t.Fatalf("verify: %d %s", code, stdout)
	}
	pushRef := "oci://127.0.0.1:1/aks-flex/bootstrap-artifacts:k8s-1.35.4"
	if _, stderr, code := run(t, "artifacts", "push", "--dir", out, pushRef); code != 1 || !strings.Contains(stderr, "upstream's layout") || !strings.Contains(stderr, "--layout native --from-dir "+out) {
		t.Fatalf("push: %d %s", code, stderr)
	}
	kubelet := filepath.Join(out, "kubernetes/v1.35.4/bin/linux", arch, "kubelet")
	os.WriteFile(kubelet, []byte("kubelex"), 0o644)
	stdout, _, code = run(t, "artifacts", "verify", "--source", out)
	if lines := strings.Split(strings.TrimSpace(stdout), "\n"); code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], kubelet+": sha256 ") || !strings.Contains(lines[0], "!= kubelet.sha256 ") {
		t.Fatalf("tampered: %d %q", code, stdout)
	}
}

func TestArtifactsBuildLegalAndDeterminism(t *testing.T) {
	src, spec := artifactsSrc(t)
	legal := t.TempDir()
	os.WriteFile(filepath.Join(legal, "LICENSE"), []byte("MIT"), 0o644)
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	for _, out := range []string{a, b} {
		_, stderr, code := run(t, "artifacts", "build", "--manifest", spec, "--output-dir", out, "--from-dir", src, "--legal-files-dir", legal)
		if code != 0 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "note: no NOTICE") {
			t.Fatalf("build: %d %q", code, stderr)
		}
	}
	ma, _ := os.ReadFile(filepath.Join(a, "manifest.json"))
	mb, _ := os.ReadFile(filepath.Join(b, "manifest.json"))
	if !bytes.Equal(ma, mb) || !strings.Contains(string(ma), `"path": "legal/LICENSE"`) {
		t.Fatalf("manifests differ or lack the LICENSE:\n%s\n%s", ma, mb)
	}
	missing := filepath.Join(t.TempDir(), "none")
	if _, stderr, code := run(t, "artifacts", "build", "--manifest", spec, "--output-dir", filepath.Join(t.TempDir(), "c"), "--from-dir", src, "--legal-files-dir", missing); code != 1 || !strings.Contains(stderr, missing) {
		t.Fatalf("missing legal dir: %d %s", code, stderr)
	}
}

func TestArtifactsUsage(t *testing.T) {
	_, spec := artifactsSrc(t)
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"schemaVersion": 1, "components": {"kubernetes": "latest"}}`), 0o644)
	for _, args := range [][]string{
		{"artifacts"},
		{"artifacts", "build", "--output-dir", "/tmp/x"},
		{"artifacts", "build", "--manifest", spec, "--output-dir", "/tmp/x", "--arch", "s390x"},
		{"artifacts", "build", "--manifest", spec, "--output-dir", "/tmp/x", "--layout", "flat"},
		{"artifacts", "build", "--manifest", bad, "--output-dir", "/tmp/x"},
		{"artifacts", "push", "--dir", "/tmp/x"},
		{"artifacts", "push", "--dir", "/tmp/x", "docker://a/b:c"},
		{"artifacts", "verify"},
		{"artifacts", "verify", "--source", "/b/{{ .KubernetesVersion }}"},
		{"artifacts", "verify", "--source", "relative"},
		{"artifacts", "verify", "--source", "oci://127.0.0.1:1/aks-flex/bootstrap-artifacts"},
		{"artifacts", "verify", "--source", "oci://127.0.0.1:1/Not A Repo:tag"},
	} {
		if _, stderr, code := run(t, args...); code != ExitInvalid {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr)
		}
	}
	_, stderr, _ := run(t, "artifacts", "build", "--manifest", bad, "--output-dir", "/tmp/x")
	if !strings.Contains(stderr, "components.kubernetes") {
		t.Errorf("spec error without its JSON path: %s", stderr)
	}
}

// artifacts verify --quick hashes a bundle once and then trusts its
// verification record in the state dir while the files are unchanged;
// without --quick it hashes every byte every time.
func TestArtifactsVerifyQuick(t *testing.T) {
	src, spec := artifactsSrc(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "var/lib/aks-flex-node"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "srv/bundle")
	if _, stderr, code := run(t, "artifacts", "build", "--manifest", spec, "--output-dir", out, "--from-dir", src); code != 0 {
		t.Fatalf("build: %d %s", code, stderr)
	}
	quick := []string{"artifacts", "verify", "--quick", "--root", root, "--source", "/srv/bundle", "--kubernetes-version", "1.35.4"}
	if stdout, stderr, code := run(t, quick...); code != 0 || !strings.Contains(stdout, out+": verified now (") || strings.Contains(stdout, "(0 bytes hashed)") {
		t.Fatalf("first --quick: %d %s %s", code, stdout, stderr)
	}
	if stdout, stderr, code := run(t, quick...); code != 0 || !strings.Contains(stdout, out+": verified (unchanged since ") || !strings.Contains(stdout, "(0 bytes hashed)") {
		t.Fatalf("second --quick: %d %s %s", code, stdout, stderr)
	}
	if stdout, _, code := run(t, "artifacts", "verify", "--source", out, "--kubernetes-version", "1.35.4"); code != 0 || !strings.Contains(stdout, "verified, 6 files") {
		t.Fatalf("full verify: %d %s", code, stdout)
	}
	kubelet := filepath.Join(out, "kubernetes/v1.35.4/bin/linux", runtime.GOARCH, "kubelet")
	fi, err := os.Stat(kubelet)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // past the kernel's coarse timestamp tick
	os.WriteFile(kubelet, []byte("kubelex"), 0o644)
	os.Chtimes(kubelet, fi.ModTime(), fi.ModTime())
	if stdout, _, code := run(t, quick...); code != 1 || !strings.Contains(stdout, kubelet+": sha256 ") {
		t.Fatalf("--quick after a same-size change with the mtime restored: %d %s", code, stdout)
	}
}
