package fsutil

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// FuzzExtractTar extracts archives built from the fuzz input into a temp
// root and checks the one property that matters: nothing outside the root
// is created, removed, changed, chowned or chmodded. The input is a
// program, five bytes per entry (kind, name, mode, link target, owner and
// xattr), over small alphabets chosen so that links, replaced directories,
// whiteouts and escapes meet often; a "layer" op starts a new archive
// extracted over the same root, as image layers are. Link targets include
// the absolute path of a host file and a host dir next to the root, and a
// relative path to them.
//
// The root sits seven directories below the checked tree, so a link that
// escaped by a few ".." would still land inside what is checked.
//
// The seed corpus (testdata/fuzz/FuzzExtractTar) holds the reproduced
// defects: a queued directory replaced by a link to a host file and to a
// host dir, a queued directory whose parent is replaced, the "a/b -> .."
// escape, writes and whiteouts through a link from an earlier layer.
func FuzzExtractTar(f *testing.F) {
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 5*64 {
			return // longer programs add time, not reach
		}
		base := t.TempDir()
		dest := filepath.Join(base, "w1/w2/w3/w4/w5/w6/dest")
		outside := filepath.Join(base, "outside")
		for _, d := range []string{dest, outside + "/dir/sub"} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(outside+"/file", []byte("host"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(outside+"/dir/f", []byte("host"), 0o600); err != nil {
			t.Fatal(err)
		}
		before := walkState(t, base, dest)
		opts, layers := decodeProgram(prog, outside, dest)
		for _, l := range layers {
			_ = ExtractTar(bytes.NewReader(l), dest, opts) // refusals are fine
		}
		after := walkState(t, base, dest)
		if d := diffState(before, after); d != "" {
			t.Fatalf("extraction changed things outside %s:\n%s\nprogram %x", dest, d, prog)
		}
	})
}

var fuzzNames = []string{
	"a", "a/b", "a/b/c", "a/b/c/d", "b", "b/c", "etc", "etc/x",
	"etc/x/y", "x", "x/y", "a/b/c/esc", "d", "d/x", "d/y", "./a",
	"a/.", "a//b", ".", "c", "c/d", "c/d/e", "lnk", "lnk/f",
	"lnk/lnk", "lnk/a/b", "a/b/lnk", "dir", "dir/sub", "dir/f", "file", "esc",
}

var fuzzModes = []int64{0o755, 0o6777, 0o000, 0o555, 0o4755, 0o644, 0o1777, 0o700}

// fuzzTargets are link targets; OUT is the host dir next to the root
// (absolute), REL the relative path from the root to it.
var fuzzTargets = []string{
	".", "..", "../..", "../../..", "../../../..", "a", "a/b", "/",
	"/OUT", "/OUT/file", "/OUT/dir", "REL", "REL/file", "x/..", "b/../..", "/a/b",
	"etc", "/etc/x", "lnk/..", "lnk/../..", "a/b/c/../../..", "/OUT/dir/sub", "REL/dir", "..//..",
	"/..", "/../..", "dir", "file", "esc/..", "c/d/../../..", "", "/OUT/dir/f",
}

var fuzzOwners = []int{0, 1000, 4242}

const fuzzTime = 1700000000

// decodeProgram turns the fuzz input into options and archives.
func decodeProgram(prog []byte, outside, dest string) (ExtractOptions, [][]byte) {
	var opts ExtractOptions
	if len(prog) > 0 {
		opts = ExtractOptions{Whiteouts: prog[0]&1 != 0, Devices: prog[0]&2 != 0, NoChown: prog[0]&4 != 0}
		prog = prog[1:]
	}
	rel, _ := filepath.Rel(dest, outside)
	var layers [][]byte
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	flush := func() {
		tw.Close()
		layers = append(layers, append([]byte(nil), buf.Bytes()...))
		buf.Reset()
		tw = tar.NewWriter(&buf)
	}
	for ; len(prog) >= 5; prog = prog[5:] {
		op := prog[:5]
		name := fuzzNames[int(op[1])%len(fuzzNames)]
		target := fuzzTargets[int(op[3])%len(fuzzTargets)]
		target = strings.Replace(strings.Replace(target, "/OUT", outside, 1), "REL", rel, 1)
		h := &tar.Header{Name: name, Mode: fuzzModes[int(op[2])%len(fuzzModes)], Format: tar.FormatPAX,
			ModTime: time.Unix(fuzzTime, 0), Uid: fuzzOwners[int(op[4]&3)%3], Gid: fuzzOwners[int(op[4]>>2&3)%3]}
		if op[4]&0x10 != 0 {
			h.PAXRecords = map[string]string{"SCHILY.xattr.user.fuzz": "1"}
		}
		body := ""
		switch op[0] % 9 {
		case 0:
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
		case 1:
			h.Typeflag, body = tar.TypeReg, "data"
		case 2:
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
		case 3:
			h.Typeflag, h.Linkname = tar.TypeLink, fuzzNames[int(op[3])%len(fuzzNames)]
		case 4:
			h.Typeflag, h.Name = tar.TypeReg, filepath.Join(filepath.Dir(name), ".wh."+filepath.Base(name))
		case 5:
			h.Typeflag, h.Name = tar.TypeReg, name+"/.wh..wh..opq"
		case 6:
			h.Typeflag = tar.TypeFifo
		case 7:
			h.Typeflag, h.Devmajor, h.Devminor = tar.TypeChar, 1, 3
		case 8:
			flush()
			continue
		}
		h.Size = int64(len(body))
		if tw.WriteHeader(h) == nil {
			tw.Write([]byte(body))
		}
	}
	flush()
	return opts, layers
}

// fileState is what the property compares: everything chmod, chown,
// chtimes, setxattr, a write or a link count change would alter.
type fileState struct {
	mode         fs.FileMode
	uid, gid     uint32
	nlink        uint64
	size         int64
	mtime, ctime int64
	link, xattrs string
	sum          [32]byte
}

// walkState records every entry under base except the tree at skip.
func walkState(t *testing.T, base, skip string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			return filepath.SkipDir
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		fi, _ := d.Info()
		s := fileState{mode: fi.Mode(), uid: st.Uid, gid: st.Gid, nlink: uint64(st.Nlink), size: st.Size,
			mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(), xattrs: xattrsOf(p)}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			s.link, _ = os.Readlink(p)
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			s.sum = sha256.Sum256(b)
		}
		out[p] = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// xattrsOf lists p's extended attributes and values, not following a
// link at p.
func xattrsOf(p string) string {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n <= 0 {
		return ""
	}
	names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		v := make([]byte, 256)
		m, _ := unix.Lgetxattr(p, name, v)
		fmt.Fprintf(&b, "%s=%q;", name, v[:max(m, 0)])
	}
	return b.String()
}

func diffState(a, b map[string]fileState) string {
	var out []string
	for p, sa := range a {
		if sb, ok := b[p]; !ok {
			out = append(out, "removed "+p)
		} else if sa != sb {
			out = append(out, fmt.Sprintf("changed %s: %+v -> %+v", p, sa, sb))
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			out = append(out, "created "+p)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
