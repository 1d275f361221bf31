package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/Azure/aks-flex-node/internal/image/deb"
)

// A .deb's payload is read into memory as headers plus content written
// to one spool file; the debs are decompressed in parallel (xz is the slow
// part of a build) and applied to the tree one after another in a fixed
// order, so the tree does not depend on which finished first.

// unpacked is one .deb read: its control, its entries in archive order.
type unpacked struct {
	pkg     *LockedPackage
	control *deb.Control
	entries []entry
}

// entry is one data.tar entry: the path as the package names it, the
// node it becomes.
type entry struct {
	orig string // as in the .deb, absolute ("/bin/ls")
	hdr  *tar.Header
	node *Node
}

// spool is an append-only file holding the contents of every regular
// file read from the packages.
type spool struct {
	mu  sync.Mutex
	f   *os.File
	off int64
}

func newSpool(dir string) (*spool, error) {
	f, err := os.CreateTemp(dir, "spool-")
	if err != nil {
		return nil, err
	}
	// Unlinked at once: the builder reads it through f only.
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	return &spool{f: f}, nil
}

// put copies n bytes of r into the spool and returns where they are.
func (s *spool) put(r io.Reader, n int64) (Section, error) {
	s.mu.Lock()
	off := s.off
	s.off += n
	s.mu.Unlock()
	w := io.NewOffsetWriter(s.f, off)
	if got, err := io.CopyN(w, r, n); err != nil {
		return Section{}, fmt.Errorf("spool: %d of %d bytes: %w", got, n, err)
	}
	return Section{R: s.f, Off: off, N: n}, nil
}

func (s *spool) Close() error { return s.f.Close() }

// readDebs reads every package file (paths parallel to pkgs) with up to
// GOMAXPROCS readers.
func readDebs(ctx context.Context, sp *spool, pkgs []*LockedPackage, files []string) ([]*unpacked, error) {
	out := make([]*unpacked, len(pkgs))
	errs := make([]error, len(pkgs))
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				out[i], errs[i] = readDeb(sp, pkgs[i], files[i])
			}
		}()
	}
	// Largest first, so that the big packages do not start last and
	// leave one core decompressing alone.
	order := make([]int, len(pkgs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return pkgs[order[a]].Size > pkgs[order[b]].Size })
	for _, i := range order {
		if ctx.Err() != nil {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, errors.Join(errs...)
}

func readDeb(sp *spool, pkg *LockedPackage, file string) (*unpacked, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	u := &unpacked{pkg: pkg}
	name := pkg.Filename
	ctl, err := deb.ReadDeb(name, f, func(tr *tar.Reader) error {
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			e, err := debEntry(sp, h, tr)
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
			if e != nil {
				e.node.Package = pkg.Name
				u.entries = append(u.entries, *e)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if got := ctl.Paragraph.Get("Package"); got != pkg.Name {
		return nil, fmt.Errorf("%s: control says package %q, the index %q", name, got, pkg.Name)
	}
	if got := ctl.Paragraph.Get("Version"); got != pkg.Version {
		return nil, fmt.Errorf("%s: control says version %q, the index %q", name, got, pkg.Version)
	}
	u.control = ctl
	return u, nil
}

// debEntry turns one payload header into an entry; nil for the root and
// for kinds an image does not hold.
func debEntry(sp *spool, h *tar.Header, r io.Reader) (*entry, error) {
	orig := path.Clean("/" + h.Name)
	if orig == "/" {
		return nil, nil
	}
	n := &Node{Type: h.Typeflag, Mode: h.Mode & 0o7777, UID: h.Uid, GID: h.Gid}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeRegA:
		n.Type = tar.TypeReg
		if h.Size < 0 {
			return nil, fmt.Errorf("negative size")
		}
		sec, err := sp.put(r, h.Size)
		if err != nil {
			return nil, err
		}
		n.Size, n.Content = h.Size, sec
	case tar.TypeSymlink:
		if h.Linkname == "" {
			return nil, fmt.Errorf("symlink without a target")
		}
		n.Link = h.Linkname
	case tar.TypeLink:
		n.Link = path.Clean("/" + h.Linkname)
	case tar.TypeDir, tar.TypeFifo:
	case tar.TypeChar, tar.TypeBlock:
		n.Major, n.Minor = h.Devmajor, h.Devminor
	default:
		return nil, nil
	}
	return &entry{orig: orig, hdr: h, node: n}, nil
}

// mergedDirs are the top-level directories merged-/usr moves below /usr.
var mergedDirs = map[string]bool{"bin": true, "sbin": true, "lib": true, "lib32": true, "lib64": true, "libx32": true, "libo32": true}

// usrMerge maps a path as a package names it to where it lives on a
// merged-/usr system: /bin/ls -> /usr/bin/ls.
func usrMerge(p string) string {
	top, _, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	if mergedDirs[top] {
		return "/usr" + p
	}
	return p
}

// apply adds one package's entries to the tree, merged-/usr, leaving out
// what the spec excludes. It returns the notes worth a log line (a path
// one package replaced from another).
func (b *builder) apply(u *unpacked) []string {
	var notes []string
	for _, e := range u.entries {
		p := usrMerge(e.orig)
		if b.spec.excluded(p) {
			continue
		}
		n := e.node
		switch n.Type {
		case tar.TypeLink:
			src := b.tree.Get(usrMerge(n.Link))
			if src == nil || src.Type != tar.TypeReg {
				notes = append(notes, fmt.Sprintf("%s: %s: hard link to %s, which is not a file here; skipped", u.pkg.Name, e.orig, n.Link))
				continue
			}
			if src.LinkID == 0 {
				src.LinkID = b.tree.linkGroup()
			}
			c := *src
			c.Package = u.pkg.Name
			n = &c
		case tar.TypeSymlink:
			if p != e.orig && !strings.HasPrefix(n.Link, "/") {
				n.Link = relink(e.orig, p, n.Link)
			}
			if b.selfLink(p, n) {
				continue
			}
		case tar.TypeDir:
			if old := b.tree.Get(p); old != nil && old.Type == tar.TypeDir {
				continue // dpkg keeps the first package's directory
			}
		}
		if old := b.tree.Get(p); old != nil && old.Type != tar.TypeDir {
			if old.Type == tar.TypeSymlink && b.selfLink(p, old) {
				// A link that pointed at the merged path itself.
			} else if old.Package != u.pkg.Name {
				notes = append(notes, fmt.Sprintf("%s: %s replaces the one from %s", u.pkg.Name, p, old.Package))
			}
		}
		b.tree.Put(p, n)
	}
	return notes
}

// selfLink reports whether link n at p points at p itself once /usr is
// merged: /usr/bin/foo -> /bin/foo, from a package that kept a
// compatibility link for the file another one ships.
func (b *builder) selfLink(p string, n *Node) bool {
	t := n.Link
	if !strings.HasPrefix(t, "/") {
		t = path.Join(path.Dir(p), t)
	}
	return usrMerge(path.Clean(t)) == p
}

// relink rewrites a relative link target written for orig so that it
// names the same file from moved, its merged-/usr place.
func relink(orig, moved, target string) string {
	abs := usrMerge(path.Join(path.Dir(orig), target))
	rel, ok := relPath(path.Dir(moved), abs)
	if !ok {
		return abs
	}
	return rel
}

// relPath is filepath.Rel for clean absolute slash paths.
func relPath(from, to string) (string, bool) {
	f, t := splitPath(from), splitPath(to)
	i := 0
	for i < len(f) && i < len(t) && f[i] == t[i] {
		i++
	}
	var parts []string
	for range f[i:] {
		parts = append(parts, "..")
	}
	parts = append(parts, t[i:]...)
	if len(parts) == 0 {
		return ".", true
	}
	return strings.Join(parts, "/"), true
}
