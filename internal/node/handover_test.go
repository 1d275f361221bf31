package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHandOver(t *testing.T) {
	from, to := t.TempDir(), t.TempDir()
	pki := filepath.Join(from, KubeletPKIDir)
	must(t, os.MkdirAll(pki, 0o755))
	must(t, os.WriteFile(filepath.Join(pki, "kubelet-client-2026.pem"), []byte("cert+key"), 0o600))
	must(t, os.Symlink(KubeletPKIDir+"/kubelet-client-2026.pem", filepath.Join(from, KubeletClientCert)))
	must(t, os.MkdirAll(filepath.Join(from, "/etc/kubernetes"), 0o755))
	must(t, os.WriteFile(filepath.Join(from, KubeletKubeconf), []byte("kubeconfig"), 0o600))
	// The new side kept a stale certificate from an earlier life.
	must(t, os.MkdirAll(filepath.Join(to, KubeletPKIDir), 0o755))
	must(t, os.WriteFile(filepath.Join(to, KubeletPKIDir, "kubelet-client-2025.pem"), []byte("old"), 0o600))

	changed, err := HandOver(from, to)
	if err != nil || !changed {
		t.Fatalf("HandOver = %v, %v", changed, err)
	}
	if b, err := os.ReadFile(filepath.Join(to, KubeletPKIDir, "kubelet-client-2026.pem")); err != nil || string(b) != "cert+key" {
		t.Errorf("certificate: %q, %v", b, err)
	}
	if fi, _ := os.Stat(filepath.Join(to, KubeletPKIDir, "kubelet-client-2026.pem")); fi == nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("certificate mode: %v", fi)
	}
	if l, err := os.Readlink(filepath.Join(to, KubeletClientCert)); err != nil || l != KubeletPKIDir+"/kubelet-client-2026.pem" {
		t.Errorf("current link: %q, %v", l, err)
	}
	if _, err := os.Lstat(filepath.Join(to, KubeletPKIDir, "kubelet-client-2025.pem")); !os.IsNotExist(err) {
		t.Errorf("stale certificate kept: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(to, KubeletKubeconf)); string(b) != "kubeconfig" {
		t.Errorf("kubeconfig: %q", b)
	}
	if changed, err := HandOver(from, to); err != nil || changed {
		t.Errorf("second HandOver = %v, %v, want converged", changed, err)
	}
}

func TestHandOverRefusesANodeThatNeverJoined(t *testing.T) {
	from, to := t.TempDir(), t.TempDir()
	must(t, os.MkdirAll(filepath.Join(from, KubeletPKIDir), 0o755))
	if _, err := HandOver(from, to); err == nil || !strings.Contains(err.Error(), "never joined") {
		t.Errorf("HandOver = %v", err)
	}
}

func TestHandOverStaysInTheMachine(t *testing.T) {
	from, to, outside := t.TempDir(), t.TempDir(), t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o600))
	must(t, os.MkdirAll(filepath.Join(from, KubeletPKIDir), 0o755))
	// An absolute link is copied as a link, never followed on the host.
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(from, KubeletClientCert)))
	if _, err := HandOver(from, to); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(to, KubeletClientCert)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link copied as %v, %v", fi, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
