package fsutil

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

type ent struct {
	name, body, link string
	typ              byte
	mode             int64
}

func mkTar(t *testing.T, ents ...ent) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link,
			ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// sandbox returns dest inside a parent dir, and a sibling "outside" dir
// that must stay empty whatever the archive says.
func sandbox(t *testing.T) (dest, outside string) {
	base := t.TempDir()
	dest, outside = filepath.Join(base, "dest"), filepath.Join(base, "outside")
	for _, d := range []string{dest, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dest, outside
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("%s was written to: %v", dir, entries)
	}
}

func TestExtractTarBasics(t *testing.T) {
	dest, _ := sandbox(t)
	tr := mkTar(t,
		ent{name: "./", typ: tar.TypeDir, mode: 0o755},
		ent{name: "usr/", typ: tar.TypeDir},
		ent{name: "usr/bin/", typ: tar.TypeDir},
		ent{name: "usr/bin/tool", body: "#!/bin/sh\n", mode: 0o4755},
		ent{name: "bin", typ: tar.TypeSymlink, link: "usr/bin"},
		ent{name: "usr/bin/tool2", typ: tar.TypeLink, link: "usr/bin/tool"},
		ent{name: "etc/os-release", typ: tar.TypeSymlink, link: "/usr/lib/os-release"},
		ent{name: "ro/", typ: tar.TypeDir, mode: 0o555},
		ent{name: "ro/f", body: "x"},
		ent{name: "dev/null", typ: tar.TypeChar, mode: 0o666},
	)
	tr2 := *tr
	if err := ExtractTar(tr, dest, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dest, "bin/tool"))
	if err != nil || string(b) != "#!/bin/sh\n" {
		t.Fatalf("bin/tool via symlink: %q %v", b, err)
	}
	fi, _ := os.Stat(filepath.Join(dest, "usr/bin/tool"))
	if fi.Mode().Perm() != 0o755 || fi.Mode()&os.ModeSetuid == 0 {
		t.Errorf("mode %v", fi.Mode())
	}
	if !fi.ModTime().Equal(time.Unix(1700000000, 0)) {
		t.Errorf("mtime %v", fi.ModTime())
	}
	fi2, _ := os.Stat(filepath.Join(dest, "usr/bin/tool2"))
	if !os.SameFile(fi, fi2) {
		t.Error("hardlink not linked")
	}
	if l, _ := os.Readlink(filepath.Join(dest, "etc/os-release")); l != "/usr/lib/os-release" {
		t.Errorf("absolute link target rewritten: %q", l)
	}
	if di, _ := os.Stat(filepath.Join(dest, "ro")); di.Mode().Perm() != 0o555 {
		t.Errorf("ro dir mode %v", di.Mode())
	}
	if di, _ := os.Stat(filepath.Join(dest, "usr")); !di.ModTime().Equal(time.Unix(1700000000, 0)) {
		t.Errorf("dir mtime %v not restored after children", di.ModTime())
	}
	if _, err := os.Lstat(filepath.Join(dest, "dev/null")); err == nil {
		t.Error("device created without Devices")
	}

	if os.Geteuid() == 0 {
		dest2, _ := sandbox(t)
		if err := ExtractTar(&tr2, dest2, ExtractOptions{Devices: true}); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(filepath.Join(dest2, "dev/null"))
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Errorf("char device: %v %v", fi, err)
		}
	}
}

func TestExtractTarRejectsEscapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		ents func(outside string) []ent
		want string
	}{
		{"absolute", func(string) []ent { return []ent{{name: "/etc/passwd", body: "x"}} }, "absolute"},
		{"dotdot", func(string) []ent { return []ent{{name: "../outside/f", body: "x"}} }, "'..'"},
		{"dotdot-inner", func(string) []ent { return []ent{{name: "a/../../outside/f", body: "x"}} }, "'..'"},
		{"relative-symlink-escape", func(string) []ent {
			return []ent{{name: "a/l", typ: tar.TypeSymlink, link: "../../outside"}}
		}, "escapes"},
		{"hardlink-escape", func(string) []ent {
			return []ent{{name: "h", typ: tar.TypeLink, link: "../outside/f"}}
		}, "hardlink target"},
		{"hardlink-absolute", func(o string) []ent {
			return []ent{{name: "h", typ: tar.TypeLink, link: o + "/f"}}
		}, "absolute"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest, outside := sandbox(t)
			os.WriteFile(filepath.Join(outside, "f"), []byte("secret"), 0o644)
			err := ExtractTar(mkTar(t, tc.ents(outside)...), dest, ExtractOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if b, _ := os.ReadFile(filepath.Join(outside, "f")); string(b) != "secret" {
				t.Fatal("outside file changed")
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 1 {
				t.Fatalf("outside written: %v", entries)
			}
		})
	}
}

// A symlink to an absolute host path is a valid link inside a rootfs, but
// writing through it must land inside dest, never at the host path.
func TestExtractTarSymlinkWriteThrough(t *testing.T) {
	dest, outside := sandbox(t)
	tr := mkTar(t,
		ent{name: "a", typ: tar.TypeSymlink, link: outside},
		ent{name: "a/passwd", body: "pwned"},
		ent{name: "b", typ: tar.TypeSymlink, link: "/"},
		ent{name: "c", typ: tar.TypeSymlink, link: "b/../../../"}, // lexically escapes: rejected
	)
	err := ExtractTar(tr, dest, ExtractOptions{})
	if err == nil || !strings.Contains(err.Error(), "escapes") {
		t.Fatalf("err = %v", err)
	}
	assertEmpty(t, outside)
	if b, err := os.ReadFile(filepath.Join(dest, outside, "passwd")); err != nil || string(b) != "pwned" {
		t.Fatalf("write-through did not land inside dest: %q %v", b, err)
	}

	// "b -> /" then "b/../x": a kernel walk would climb out of dest from
	// the link's target; ours clamps at dest.
	dest, outside = sandbox(t)
	tr = mkTar(t,
		ent{name: "b", typ: tar.TypeSymlink, link: "/"},
		ent{name: "d", typ: tar.TypeSymlink, link: "b/.."},
		ent{name: "d/outside/x", body: "pwned"},
		ent{name: "e", typ: tar.TypeSymlink, link: "/" + filepath.Base(outside)},
		ent{name: "e", body: "replaces the link"},
	)
	if err := ExtractTar(tr, dest, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, outside)
	if _, err := os.Stat(filepath.Join(dest, "outside/x")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Lstat(filepath.Join(dest, "e")); !fi.Mode().IsRegular() {
		t.Fatal("existing symlink not replaced")
	}
}

func TestExtractTarWhiteouts(t *testing.T) {
	dest, _ := sandbox(t)
	lower := mkTar(t,
		ent{name: "etc/", typ: tar.TypeDir},
		ent{name: "etc/keep", body: "k"},
		ent{name: "etc/gone", body: "g"},
		ent{name: "opq/", typ: tar.TypeDir},
		ent{name: "opq/old", body: "o"},
		ent{name: "opq/sub/old", body: "o"},
	)
	if err := ExtractTar(lower, dest, ExtractOptions{Whiteouts: true}); err != nil {
		t.Fatal(err)
	}
	upper := mkTar(t,
		ent{name: "etc/.wh.gone"},
		ent{name: "opq/new", body: "n"},
		ent{name: "opq/sub/new", body: "n"},
		ent{name: "opq/.wh..wh..opq"},
	)
	if err := ExtractTar(upper, dest, ExtractOptions{Whiteouts: true}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		"etc/keep": true, "etc/gone": false, "etc/.wh.gone": false,
		"opq/old": false, "opq/sub/old": false, "opq/new": true, "opq/sub/new": true,
		"opq/.wh..wh..opq": false,
	} {
		_, err := os.Lstat(filepath.Join(dest, p))
		if (err == nil) != want {
			t.Errorf("%s exists=%v, want %v", p, err == nil, want)
		}
	}

	// Without Whiteouts they are plain files.
	dest, _ = sandbox(t)
	if err := ExtractTar(mkTar(t, ent{name: "x/.wh.y"}), dest, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dest, "x/.wh.y")); err != nil {
		t.Fatal(err)
	}
}

func TestExtractTarXattrs(t *testing.T) {
	dest, _ := sandbox(t)
	probe := filepath.Join(dest, "probe")
	os.WriteFile(probe, nil, 0o644)
	if err := syscall.Setxattr(probe, "user.probe", []byte("1"), 0); err != nil {
		t.Skipf("no user xattrs on %s: %v", dest, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o755, Size: 1,
		PAXRecords: map[string]string{"SCHILY.xattr.user.aks": "v"}, Format: tar.FormatPAX})
	tw.Write([]byte("x"))
	tw.Close()
	if err := ExtractTar(&buf, dest, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 16)
	n, err := syscall.Getxattr(filepath.Join(dest, "f"), "user.aks", val)
	if err != nil || string(val[:n]) != "v" {
		t.Fatalf("xattr = %q, %v", val[:n], err)
	}
}
