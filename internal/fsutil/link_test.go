package fsutil

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWriteStreamAtomic(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	p := filepath.Join(dir, "lib", "agent-blue")
	sum, err := WriteStreamAtomic(p, strings.NewReader("v1"), 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256([]byte("v1")); sum != hex.EncodeToString(want[:]) {
		t.Errorf("sum %s is not the SHA-256 of what was written", sum)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v, %v; want 0755 despite umask 077", fi.Mode().Perm(), err)
	}

	// A link at path is replaced, never written through.
	outside := filepath.Join(dir, "outside")
	if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(p)
	if err := os.Symlink(outside, p); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteStreamAtomic(p, strings.NewReader("v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep" {
		t.Errorf("wrote through the link: outside holds %q", b)
	}
	if fi, _ := os.Lstat(p); !fi.Mode().IsRegular() {
		t.Errorf("path is %v, want a regular file", fi.Mode())
	}

	// A failed read leaves the old content and no temp file.
	boom := errors.New("boom")
	_, err = WriteStreamAtomic(p, io.MultiReader(strings.NewReader("half"), errReader{boom}), 0o755)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), p) {
		t.Fatalf("failed read: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "v2" {
		t.Errorf("content after a failed write = %q, want v2", b)
	}
	if des, _ := os.ReadDir(filepath.Dir(p)); len(des) != 1 {
		t.Errorf("left behind: %v", des)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
