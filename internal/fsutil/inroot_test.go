package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hostileRoot is a rootfs whose links name host paths: an absolute link
// to the host dir, a relative one climbing out, and a link at a file's
// own name.
func hostileRoot(t *testing.T) (root, host string) {
	t.Helper()
	base := t.TempDir()
	root, host = filepath.Join(base, "rootfs"), filepath.Join(base, "host")
	for _, d := range []string{root + "/etc", host} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(host, "keep"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"etc/kubernetes": host,         // absolute: means <root>/<host> inside
		"etc/climb":      "../../host", // relative, climbs out for the kernel
		"etc/keep":       host + "/keep",
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return root, host
}

func assertHostUntouched(t *testing.T, host string) {
	t.Helper()
	entries, _ := os.ReadDir(host)
	if len(entries) != 1 || entries[0].Name() != "keep" {
		t.Errorf("host dir %s written: %v", host, entries)
	}
	if b, _ := os.ReadFile(filepath.Join(host, "keep")); string(b) != "host" {
		t.Errorf("host file changed: %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(host, "keep")); fi.Mode().Perm() != 0o644 {
		t.Errorf("host file mode changed: %v", fi.Mode())
	}
}

func TestWriteFileInStaysInRoot(t *testing.T) {
	root, host := hostileRoot(t)
	for _, p := range []string{"/etc/kubernetes/bootstrap-kubelet.conf", "etc/climb/x", "/etc/climb/../../../y"} {
		changed, err := WriteFileIn(root, p, []byte("token"), 0o600)
		if err != nil || !changed {
			t.Fatalf("%s: %v %v", p, changed, err)
		}
	}
	assertHostUntouched(t, host)
	for _, p := range []string{host + "/bootstrap-kubelet.conf", "/host/x", "/y"} {
		fi, err := os.Stat(filepath.Join(root, p))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s not inside the root with 0600: %v %v", p, fi, err)
		}
	}
	// A link at the file's own name is replaced, not written through.
	if changed, err := WriteFileIn(root, "/etc/keep", []byte("new"), 0o644); err != nil || !changed {
		t.Fatal(changed, err)
	}
	assertHostUntouched(t, host)
	if fi, _ := os.Lstat(filepath.Join(root, "etc/keep")); !fi.Mode().IsRegular() {
		t.Error("link at the target not replaced")
	}
	if changed, err := WriteFileIn(root, "/etc/keep", []byte("new"), 0o644); err != nil || changed {
		t.Errorf("converged re-run: %v %v", changed, err)
	}
	if _, err := WriteFileIn(root, "/", nil, 0o644); err == nil {
		t.Error("writing the root itself succeeded")
	}
}

func TestSymlinkAndRemoveInStayInRoot(t *testing.T) {
	root, host := hostileRoot(t)
	if changed, err := SymlinkIn(root, "/etc/kubernetes/link", "/target"); err != nil || !changed {
		t.Fatal(changed, err)
	}
	if changed, err := SymlinkIn(root, "/etc/kubernetes/link", "/target"); err != nil || changed {
		t.Fatalf("re-run: %v %v", changed, err)
	}
	if l, err := os.Readlink(filepath.Join(root, host, "link")); err != nil || l != "/target" {
		t.Errorf("link inside the root: %q %v", l, err)
	}
	if _, err := SymlinkIn(root, "/etc/climb/keep", "/x"); err != nil {
		t.Fatal(err) // <root>/host/keep does not exist: a new link
	}
	assertHostUntouched(t, host)

	// Remove through a link to the host dir: the host's file stays.
	if removed, err := RemoveIn(root, "/etc/kubernetes/keep"); err != nil || removed {
		t.Errorf("remove through a link: removed %v, %v", removed, err)
	}
	if removed, err := RemoveIn(root, "/etc/climb/keep"); err != nil || !removed {
		t.Errorf("remove of the link inside the root: %v %v", removed, err)
	}
	if removed, err := RemoveIn(root, "/etc/keep"); err != nil || !removed {
		t.Errorf("remove of a link at the name: %v %v", removed, err)
	}
	if removed, err := RemoveIn(root, "/no/such/dir/f"); err != nil || removed {
		t.Errorf("missing parent: %v %v", removed, err)
	}
	assertHostUntouched(t, host)
}

func TestReadFileInStaysInRoot(t *testing.T) {
	root, host := hostileRoot(t)
	if _, err := ReadFileIn(root, "/etc/keep", 1<<10); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read through an absolute link to the host: %v, want not found inside the root", err)
	}
	if err := os.MkdirAll(filepath.Join(root, host), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, host, "keep"), []byte("inside"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFileIn(root, "/etc/keep", 1<<10); err != nil || string(b) != "inside" {
		t.Errorf("read: %q %v", b, err)
	}
	if _, err := ReadFileIn(root, "/etc/keep", 3); err == nil || !strings.Contains(err.Error(), "larger than 3 bytes") {
		t.Errorf("limit: %v", err)
	}
}

// Only regular files are opened, and a named pipe does not block.
func TestOpenRegularRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "manifest.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fifo, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, filepath.Join(dir, "link"), dir, "/dev/null"} {
		done := make(chan error, 1)
		go func() {
			f, err := OpenRegular(p)
			if err == nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), p) {
				t.Errorf("%s: %v, want ErrNotRegular naming the path", p, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("OpenRegular(%s) blocked", p)
		}
	}
	if _, err := ReadFileIn(dir, "/manifest.json", 10); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadFileIn of a FIFO: %v", err)
	}
}

func TestSymlinkInReplacesAndRefuses(t *testing.T) {
	root := t.TempDir()
	const target = "/etc/systemd/system/kubelet.service"
	link := filepath.Join(root, "wants", "kubelet.service")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/lib/systemd/system/kubelet.service", link); err != nil {
		t.Fatal(err)
	}
	if changed, err := SymlinkIn(root, "/wants/kubelet.service", target); err != nil || !changed {
		t.Fatalf("retarget: changed=%v err=%v", changed, err)
	}
	if got, _ := os.Readlink(link); got != target {
		t.Errorf("link -> %q", got)
	}
	if changed, err := SymlinkIn(root, "/wants/kubelet.service", target); err != nil || changed {
		t.Errorf("converged link: changed=%v err=%v", changed, err)
	}
	plain := filepath.Join(root, "wants", "plain.service")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := SymlinkIn(root, "/wants/plain.service", target); err == nil || !strings.Contains(err.Error(), plain) {
		t.Errorf("replacing a regular file: err = %v", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(link))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "kubelet.service plain.service" {
		t.Errorf("directory holds %v", names)
	}
}
