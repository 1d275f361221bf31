package artifact

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/node/nodedirs"
)

// bounded runs f and fails the test if it has not returned within 10 s:
// what hangs on a named pipe hangs forever.
func bounded(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s blocked for 10s", what)
	}
}

// fifoAt replaces rel in dir by a named pipe nobody writes to.
func fifoAt(t *testing.T, dir, rel string) string {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Issue 13, defect 9: a named pipe as manifest.json, as a .sha256 sidecar
// or as a payload file hung verify (and so preflight and start) for good.
// Each is a problem naming the file, returned at once.
func TestVerifyFIFOInBundle(t *testing.T) {
	for _, rel := range []string{ManifestName, kubeletPath(testComponents) + ".sha256", kubeletPath(testComponents), "images/pause.tar"} {
		t.Run(rel, func(t *testing.T) {
			dir := makeBundle(t, testComponents)
			p := fifoAt(t, dir, rel)
			var ps []Problem
			bounded(t, "Verify", func() { ps = Verify(context.Background(), dir, testComponents) })
			found := false
			for _, pr := range ps {
				if strings.Contains(pr.Error(), p) && strings.Contains(pr.Error(), "not a regular file") {
					found = true
				}
			}
			if !found {
				t.Errorf("problems %v: none names %s as not a regular file", ps, p)
			}
		})
	}
}

// The stager (preflight's check and start's stage) reads the same way.
func TestStagerVerifyFIFOManifest(t *testing.T) {
	dir := makeBundle(t, testComponents)
	p := fifoAt(t, dir, ManifestName)
	s := testStager(t, dir, nil)
	var err error
	bounded(t, "Stager.Verify", func() { err = s.Verify(context.Background(), dir) })
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("err = %v, want it to name %s", err, p)
	}
}

// A machine rootfs whose install dirs are links to host dirs: Install and
// the components stamp stay inside the rootfs.
func TestInstallHostileRootfsLinks(t *testing.T) {
	dir := makeBundle(t, testComponents)
	base := t.TempDir()
	root, host := filepath.Join(base, "rootfs"), filepath.Join(base, "host")
	for _, d := range []string{root + "/usr/local", root + "/opt", root + "/var/lib", host} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{
		"usr/local/bin":         host,             // absolute
		"usr/local/sbin":        "../../../host",  // relative, climbs out for the kernel
		"opt/cni":               "/../../" + host, // ".." at the machine's / stays there
		"var/lib/aks-flex-node": host,
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Install(context.Background(), dir, root, nil); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(host); len(entries) != 0 {
		t.Fatalf("Install wrote on the host: %v", entries)
	}
	for _, p := range []string{filepath.Join(host, "kubelet"), "/host/runc", filepath.Join(host, "bin/bridge"), filepath.Join(host, "images/pause.tar")} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("not installed inside the rootfs: %v", err)
		}
	}
	roots, err := installedRoots(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range roots {
		if !strings.HasPrefix(r, root+"/") {
			t.Errorf("stamped dir %s is outside the rootfs", r)
		}
	}
}

// A running machine swaps an installed binary for a named pipe: the
// converged re-run's content check must not hang on it.
func TestInstallInstalledFIFO(t *testing.T) {
	dir := makeBundle(t, testComponents)
	root := t.TempDir()
	if _, err := Install(context.Background(), dir, root, nil); err != nil {
		t.Fatal(err)
	}
	fifoAt(t, root, nodedirs.Bin+"/kubelet")
	var err error
	bounded(t, "Install", func() { _, err = Install(context.Background(), dir, root, nil) })
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(root, nodedirs.Bin, "kubelet")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("kubelet not replaced by the bundle's: %v %v", fi, err)
	}
}

// artifacts build reads its inputs the same way: a named pipe as the spec
// or as a component file is refused naming it, not waited on.
func TestBuildInputsFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "spec.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	var specErr, copyErr error
	bounded(t, "LoadSpec", func() { _, specErr = LoadSpec(fifo) })
	bounded(t, "copyFile", func() { _, copyErr = copyFile(context.Background(), fifo, t.TempDir(), "kubelet") })
	for _, err := range []error{specErr, copyErr} {
		if err == nil || !strings.Contains(err.Error(), fifo) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("err = %v, want a refusal naming %s", err, fifo)
		}
	}
}
