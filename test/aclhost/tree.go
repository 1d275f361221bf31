package aclhost

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// ChangeKind says what happened to a path in a host's overlay.
type ChangeKind string

const (
	Added    ChangeKind = "A" // not in the image
	Modified ChangeKind = "M" // in the image, replaced or changed (copied up)
	Deleted  ChangeKind = "D" // in the image, removed (whiteout)
	Replaced ChangeKind = "R" // directory removed and recreated (opaque)
)

// Change is one entry of ChangeSet.
type Change struct {
	Kind ChangeKind
	Path string // absolute, as seen inside the host
}

func (c Change) String() string { return string(c.Kind) + " " + c.Path }

// Changes lists every path the host created, modified or deleted relative to
// the image, sorted: exactly the non-directory entries of the overlay upper
// dir plus new and recreated directories. Directories that merely contain a
// change are not listed. Writes through nspawn's own mounts (/run, /tmp,
// /dev) are not in the overlay and not listed.
func (h *Host) Changes() ([]string, error) {
	cs, err := h.ChangeSet()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Path
	}
	return out, nil
}

// ChangesUnder is Changes limited to dir itself and what is below it: what
// a test asks when it checks that nothing was written under /usr.
func (h *Host) ChangesUnder(dir string) ([]string, error) {
	all, err := h.Changes()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range all {
		if under(p, dir) {
			out = append(out, p)
		}
	}
	return out, nil
}

// under reports whether host path p is dir or inside it (/usr/x is under
// /usr; /usrx is not).
func under(p, dir string) bool {
	dir = strings.TrimSuffix(dir, "/")
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// ChangeSet is Changes with the kind of each change.
func (h *Host) ChangeSet() ([]Change, error) {
	return overlayChanges(h.upper, h.lowers)
}

func isWhiteout(info fs.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && info.Mode()&fs.ModeCharDevice != 0 && st.Rdev == 0
}

func isOpaque(p string) bool {
	buf := make([]byte, 8)
	n, err := syscall.Getxattr(p, "trusted.overlay.opaque", buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

// inLowers reports whether rel exists in the stack of lower layers (top
// first), honouring whiteouts in upper lower layers.
func inLowers(lowers []string, rel string) bool {
	for _, l := range lowers {
		info, err := os.Lstat(filepath.Join(l, rel))
		if err != nil {
			continue
		}
		return !isWhiteout(info)
	}
	return false
}

func overlayChanges(upper string, lowers []string) ([]Change, error) {
	var out []Change
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(upper, p)
		if err != nil || rel == "." {
			return err
		}
		abs := "/" + filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case isWhiteout(info):
			out = append(out, Change{Deleted, abs})
		case d.IsDir():
			if isOpaque(p) {
				out = append(out, Change{Replaced, abs})
			} else if !inLowers(lowers, rel) {
				out = append(out, Change{Added, abs})
			}
		case inLowers(lowers, rel):
			out = append(out, Change{Modified, abs})
		default:
			out = append(out, Change{Added, abs})
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, err
}

// Entry describes one file in a Tree.
type Entry struct {
	Mode   fs.FileMode
	UID    uint32
	GID    uint32
	Size   int64  // regular files only
	SHA256 string // regular files only
	Link   string // symlinks only
}

func (e Entry) String() string {
	s := fmt.Sprintf("%v %d:%d", e.Mode, e.UID, e.GID)
	switch {
	case e.Mode.IsRegular():
		s += fmt.Sprintf(" size=%d sha256=%.12s", e.Size, e.SHA256)
	case e.Mode&fs.ModeSymlink != 0:
		s += " -> " + e.Link
	}
	return s
}

// Tree maps absolute paths (as seen inside the host) to their entries.
type Tree map[string]Entry

// DefaultExcludes are paths Snapshot leaves out because they change on
// their own while a host runs, not because the code under test wrote them.
// A pattern excludes a path if it matches the path or any of its parents
// (path.Match syntax). Keep this list short and explicit: anything left out
// here is something a "tree before == tree after" test cannot see.
var DefaultExcludes = []string{
	// kernel and API file systems
	"/proc", "/sys", "/dev",
	// the journal and login accounting
	"/var/log/journal", "/run/log/journal", "/var/log/wtmp", "/var/log/btmp", "/var/log/lastlog", "/run/utmp",
	// systemd's and dbus's runtime state and per-service private tmp dirs
	"/run/systemd", "/run/user", "/run/dbus", "/run/credentials", "/run/mount", "/run/lock",
	"/var/lib/systemd/random-seed", "/var/lib/systemd/timers", "/var/lib/systemd/linger",
	"/tmp/systemd-private-*", "/var/tmp/systemd-private-*",
	// put there by systemd-nspawn, not by the host
	"/run/host",
}

// Snapshot records the trees at paths inside the running host (through
// Path, so the host's own mounts are seen), leaving out DefaultExcludes.
func (h *Host) Snapshot(paths ...string) (Tree, error) {
	return SnapshotDir(h.Path("/"), DefaultExcludes, paths...)
}

// SnapshotDir records the trees at paths (absolute, relative to root) below
// root, leaving out excludes. Symlinks are recorded, not followed; a missing
// path is recorded as absent (no entries).
func SnapshotDir(root string, excludes []string, paths ...string) (Tree, error) {
	t := Tree{}
	for _, p := range paths {
		p = path.Clean("/" + p)
		start := filepath.Join(root, p)
		err := filepath.WalkDir(start, func(fp string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // vanished while walking (or never there)
				}
				return err
			}
			rel, err := filepath.Rel(root, fp)
			if err != nil {
				return err
			}
			abs := path.Clean("/" + filepath.ToSlash(rel))
			if excluded(abs, excludes) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			} else if err != nil {
				return err
			}
			e := Entry{Mode: info.Mode()}
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				e.UID, e.GID = st.Uid, st.Gid
			}
			switch {
			case info.Mode().IsRegular():
				e.Size = info.Size()
				if e.SHA256, err = fileSHA256(fp); err != nil {
					if errors.Is(err, fs.ErrNotExist) {
						return nil
					}
					return err
				}
			case info.Mode()&fs.ModeSymlink != 0:
				if e.Link, err = os.Readlink(fp); err != nil {
					return err
				}
			}
			t[abs] = e
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", p, err)
		}
	}
	return t, nil
}

func excluded(p string, excludes []string) bool {
	for q := p; ; q = path.Dir(q) {
		for _, pat := range excludes {
			if ok, _ := path.Match(pat, q); ok {
				return true
			}
		}
		if q == "/" {
			return false
		}
	}
}

func fileSHA256(p string) (string, error) {
	sum, _, err := fsutil.FileSHA256(p)
	return sum, err
}

// Diff lists the differences from a to b, sorted by path: "+ path entry"
// (only in b), "- path entry" (only in a), "~ path: a-entry -> b-entry".
// An empty result means the trees are equal.
func Diff(a, b Tree) []string {
	var out []string
	for p, ea := range a {
		eb, ok := b[p]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("- %s %v", p, ea))
		case ea != eb:
			out = append(out, fmt.Sprintf("~ %s: %v -> %v", p, ea, eb))
		}
	}
	for p, eb := range b {
		if _, ok := a[p]; !ok {
			out = append(out, fmt.Sprintf("+ %s %v", p, eb))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return strings.TrimLeft(out[i], "+-~ ") < strings.TrimLeft(out[j], "+-~ ")
	})
	return out
}
