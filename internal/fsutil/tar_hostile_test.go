package fsutil

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hostTarget is a file and a directory outside dest, with known modes and
// times, that hostile archives aim at.
type hostTarget struct{ file, dir string }

var hostTime = time.Unix(1600000000, 0)

func newHostTarget(t *testing.T, outside string) hostTarget {
	t.Helper()
	h := hostTarget{filepath.Join(outside, "host-file"), filepath.Join(outside, "host-dir")}
	if err := os.WriteFile(h.file, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(h.dir, 0o750); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{h.file, h.dir} {
		if err := os.Chmod(p, map[bool]os.FileMode{true: 0o644, false: 0o750}[p == h.file]); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, hostTime, hostTime); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// check fails when anything about the targets changed: mode (setuid
// included), owner, mtime, or a user xattr appeared.
func (h hostTarget) check(t *testing.T) {
	t.Helper()
	for p, mode := range map[string]os.FileMode{h.file: 0o644, h.dir: 0o750 | os.ModeDir} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), mode)
		}
		if !fi.ModTime().Equal(hostTime) {
			t.Errorf("%s: mtime %v, want %v", p, fi.ModTime(), hostTime)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Getuid() {
			t.Errorf("%s: owner %d", p, st.Uid)
		}
		if _, err := syscall.Getxattr(p, "user.evil", make([]byte, 16)); err == nil {
			t.Errorf("%s: xattr user.evil set", p)
		}
	}
}

func dirEnt(name string, mode int64) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode, Uid: 4242, Gid: 4242,
		ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX,
		PAXRecords: map[string]string{"SCHILY.xattr.user.evil": "1"}}
}

func linkEnt(name, target string) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777, Format: tar.FormatPAX}
}

func tarOf(t *testing.T, hdrs ...*tar.Header) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// Issue 13, defect 1: a directory entry queues its metadata until the end;
// a later entry replacing it by a symlink to a host path must not make
// that metadata land on the host path (it made a host file -rwsrwsrwx).
func TestExtractTarDeferredMetaNotThroughReplacingLink(t *testing.T) {
	dest, outside := sandbox(t)
	h := newHostTarget(t, outside)
	tr := tarOf(t,
		dirEnt("etc/", 0o6777),
		linkEnt("etc", h.file), // absolute: kept verbatim, valid in a rootfs
		dirEnt("var/", 0o6777),
		linkEnt("var", h.dir),
		dirEnt("a/", 0o755),
		dirEnt("a/host-dir/", 0o6777),
		linkEnt("a", outside), // replaces a parent of a queued directory
	)
	if err := ExtractTar(tr, dest, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	h.check(t)
	for _, n := range []string{"etc", "var", "a"} {
		if fi, err := os.Lstat(filepath.Join(dest, n)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is not the archive's symlink: %v %v", n, fi, err)
		}
	}
}

// A directory replaced by a file: the file keeps its own mode, not the
// directory's queued one.
func TestExtractTarDeferredMetaNotOnReplacingFile(t *testing.T) {
	dest, _ := sandbox(t)
	tr := tarOf(t,
		dirEnt("d/", 0o6777),
		&tar.Header{Name: "d", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1, Format: tar.FormatPAX},
	)
	if err := ExtractTar(tr, dest, ExtractOptions{NoChown: true}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Lstat(filepath.Join(dest, "d")); fi.Mode() != 0o644 {
		t.Errorf("file that replaced a directory has mode %v, want -rw-r--r--", fi.Mode())
	}
}

// The same directory twice: the later entry's metadata wins, as it does
// for every other kind of entry.
func TestExtractTarDirTwiceLastWins(t *testing.T) {
	dest, _ := sandbox(t)
	tr := tarOf(t, dirEnt("d/", 0o700), dirEnt("d/", 0o751))
	if err := ExtractTar(tr, dest, ExtractOptions{NoChown: true}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Lstat(filepath.Join(dest, "d")); fi.Mode().Perm() != 0o751 {
		t.Errorf("mode %v, want 0751", fi.Mode().Perm())
	}
}

// Verify runs after the last entry and before any directory metadata: an
// error from it stops the extraction with no archive mode applied.
func TestExtractTarVerifyBeforeDirMeta(t *testing.T) {
	dest, _ := sandbox(t)
	bad := errors.New("digest mismatch")
	called := false
	tr := tarOf(t, dirEnt("ro/", 0o555), &tar.Header{Name: "ro/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2})
	err := ExtractTar(tr, dest, ExtractOptions{NoChown: true, Verify: func() error {
		called = true
		if _, err := os.Stat(filepath.Join(dest, "ro/f")); err != nil {
			t.Errorf("Verify ran before the last entry: %v", err)
		}
		return bad
	}})
	if !called || !errors.Is(err, bad) {
		t.Fatalf("err = %v, called %v", err, called)
	}
	if fi, _ := os.Stat(filepath.Join(dest, "ro")); fi.Mode().Perm() != 0o700 {
		t.Errorf("ro has mode %v after a failed Verify: metadata applied before verification", fi.Mode().Perm())
	}
}

// Issue 13, defect 8: the escape check measured the archive name: after
// "a/b -> ..", "a/b/c/esc" is one directory below the root, not three, so
// "../../outside" from there leaves it.
func TestExtractTarSymlinkEscapeFromResolvedParent(t *testing.T) {
	dest, outside := sandbox(t)
	tr := mkTar(t,
		ent{name: "a/", typ: tar.TypeDir},
		ent{name: "a/b", typ: tar.TypeSymlink, link: ".."},
		ent{name: "a/b/c/", typ: tar.TypeDir},
		ent{name: "a/b/c/esc", typ: tar.TypeSymlink, link: "../../outside"},
	)
	err := ExtractTar(tr, dest, ExtractOptions{})
	if err == nil || !strings.Contains(err.Error(), "escapes") {
		t.Fatalf("err = %v, want the link rejected as escaping", err)
	}
	if _, err := os.Lstat(filepath.Join(dest, "c/esc")); err == nil {
		if p, err := filepath.EvalSymlinks(filepath.Join(dest, "c/esc")); err == nil && p == outside {
			t.Errorf("c/esc resolves to %s", p)
		}
	}

	// Measured from where the link really is, a link that stays inside
	// is still fine.
	dest, _ = sandbox(t)
	tr = mkTar(t,
		ent{name: "a/", typ: tar.TypeDir},
		ent{name: "a/b", typ: tar.TypeSymlink, link: ".."},
		ent{name: "a/b/c/", typ: tar.TypeDir},
		ent{name: "a/b/c/ok", typ: tar.TypeSymlink, link: "../a"},
	)
	if err := ExtractTar(tr, dest, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	if l, err := os.Readlink(filepath.Join(dest, "c/ok")); err != nil || l != "../a" {
		t.Errorf("c/ok: %q %v", l, err)
	}
}
