package fsutil

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestWriteFileAtomicAndIdempotent(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	p := filepath.Join(dir, "a", "b", "unit.service")
	changed, err := WriteFile(p, []byte("x"), 0o644)
	if err != nil || !changed {
		t.Fatalf("first write: %v %v", changed, err)
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 despite umask 077", fi.Mode().Perm())
	}
	di, _ := os.Stat(filepath.Join(dir, "a"))
	if di.Mode().Perm() != 0o755 {
		t.Errorf("dir mode %v, want 0755 despite umask 077", di.Mode().Perm())
	}
	before := fi.ModTime()
	changed, err = WriteFile(p, []byte("x"), 0o644)
	if err != nil || changed {
		t.Fatalf("same content rewritten: %v %v", changed, err)
	}
	if fi2, _ := os.Stat(p); !fi2.ModTime().Equal(before) {
		t.Error("file touched on a converged write")
	}
	if changed, _ := WriteFile(p, []byte("x"), 0o600); !changed {
		t.Error("mode change not applied")
	}
	if changed, _ := WriteFile(p, []byte("y"), 0o600); !changed {
		t.Error("content change not applied")
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Errorf("temp files left behind: %v", entries)
	}
}

func TestRemoveIfExists(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if removed, err := RemoveIfExists(p); removed || err != nil {
		t.Fatalf("missing: %v %v", removed, err)
	}
	_ = os.WriteFile(p, nil, 0o600)
	if removed, err := RemoveIfExists(p); !removed || err != nil {
		t.Fatalf("present: %v %v", removed, err)
	}
}

func TestMkdirAllRejectsFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	_ = os.WriteFile(p, nil, 0o600)
	if err := MkdirAll(p, 0o755); err == nil {
		t.Fatal("MkdirAll over a file succeeded")
	}
}

func TestFileSHA256(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	sum, n, err := FileSHA256(p)
	if err != nil || n != 3 || sum != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("FileSHA256 = %s, %d, %v", sum, n, err)
	}
	if _, _, err := FileSHA256(p + ".missing"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// Issue 13, defect 4: renameio.WriteFile keeps an existing file's mode
// over the one asked for, so a token-bearing file that was 0644 stayed
// 0644 and every re-run reported changed=true.
func TestWriteFileModeWinsOverExisting(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, old, new string }{
		{"other content", "old", "token"},
		{"same content", "token", "token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			if err := os.WriteFile(p, []byte(tc.old), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, 0o644); err != nil {
				t.Fatal(err)
			}
			changed, err := WriteFile(p, []byte(tc.new), 0o600)
			if err != nil || !changed {
				t.Fatalf("first write: changed %v, %v", changed, err)
			}
			if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %v after WriteFile(0600), want 0600", fi.Mode().Perm())
			}
			if changed, err := WriteFile(p, []byte(tc.new), 0o600); err != nil || changed {
				t.Errorf("re-run: changed %v, %v; want a converged no-op", changed, err)
			}
		})
	}
}

// A write killed between renameio's temp file and its rename leaves
// ".<name><digits>"; RemovePending removes those of its file only.
func TestRemovePendingRemovesOnlyThatFilesPendingWrites(t *testing.T) {
	dir := t.TempDir()
	unit := filepath.Join(dir, "aks-flex-node-recovery.service")
	keep := []string{"aks-flex-node-recovery.service", ".aks-flex-node-recovery.service.tmp-x", ".aks-flex-node-recovery.serviceX1", ".other.service42", ".aks-flex-node-recovery.timer7"}
	gone := []string{".aks-flex-node-recovery.service4290705774066816956", ".aks-flex-node-recovery.service1"}
	for _, n := range append(append([]string{}, keep...), gone...) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A directory of that name is not a pending write.
	if err := os.Mkdir(filepath.Join(dir, ".aks-flex-node-recovery.service77"), 0o755); err != nil {
		t.Fatal(err)
	}
	keep = append(keep, ".aks-flex-node-recovery.service77")
	if err := RemovePending(unit); err != nil {
		t.Fatal(err)
	}
	for _, n := range keep {
		if _, err := os.Lstat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s removed: %v", n, err)
		}
	}
	for _, n := range gone {
		if _, err := os.Lstat(filepath.Join(dir, n)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s kept: %v", n, err)
		}
	}
	if err := RemovePending(filepath.Join(dir, "absent", "x")); err != nil {
		t.Errorf("a missing dir: %v", err)
	}
}
