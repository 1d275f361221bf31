package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// Tree is an image's file system held in memory: what the builder
// assembles and packs, and what the contract is checked against (built
// from a layer's tar headers, without contents). Paths are absolute and
// clean; "/" is always a directory.
type Tree struct {
	nodes map[string]*Node
	// nextID numbers hard-link groups.
	nextID int
}

// Node is one entry of a Tree.
type Node struct {
	Type     byte  // a tar type flag: TypeReg, TypeDir, TypeSymlink, TypeChar, TypeBlock, TypeFifo
	Mode     int64 // permission bits and setuid/setgid/sticky
	UID, GID int
	Link     string // symlink target
	Size     int64
	Major    int64
	Minor    int64
	// Content opens a regular file's bytes; nil in a tree built from
	// headers only.
	Content Content
	// LinkID is shared by the paths of one hard-linked file (0: none).
	LinkID int
	// Package is the package that installed the path ("" for the builder).
	Package string
}

// Content is a regular file's bytes.
type Content interface {
	Open() (io.ReadCloser, error)
}

// Bytes is content held in memory.
type Bytes []byte

func (b Bytes) Open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }

// HostFile is content read from a file on the build machine.
type HostFile string

func (f HostFile) Open() (io.ReadCloser, error) { return os.Open(string(f)) }

// Section is content at an offset of a spool file.
type Section struct {
	R   io.ReaderAt
	Off int64
	N   int64
}

func (s Section) Open() (io.ReadCloser, error) {
	return io.NopCloser(io.NewSectionReader(s.R, s.Off, s.N)), nil
}

// NewTree returns a tree holding only "/".
func NewTree() *Tree {
	return &Tree{nodes: map[string]*Node{"/": {Type: tar.TypeDir, Mode: 0o755}}}
}

// Get returns the node at p without following a final symlink.
func (t *Tree) Get(p string) *Node { return t.nodes[p] }

// Len is the number of entries, "/" included.
func (t *Tree) Len() int { return len(t.nodes) }

// Put sets the node at p, making missing parents as root-owned 0755
// directories. A directory replacing a non-directory, or the other way
// round, drops what was below the old one.
func (t *Tree) Put(p string, n *Node) {
	p = path.Clean("/" + p)
	if p == "/" {
		if n.Type == tar.TypeDir {
			t.nodes["/"] = n
		}
		return
	}
	t.mkdirs(path.Dir(p))
	if old := t.nodes[p]; old != nil && old.Type == tar.TypeDir && n.Type != tar.TypeDir {
		t.RemoveAll(p)
	}
	t.nodes[p] = n
}

// mkdirs makes p and its parents directories, replacing a non-directory
// on the way (as dpkg replaces a file by a directory).
func (t *Tree) mkdirs(p string) {
	if p == "/" {
		return
	}
	if n := t.nodes[p]; n != nil && n.Type == tar.TypeDir {
		return
	}
	t.mkdirs(path.Dir(p))
	t.nodes[p] = &Node{Type: tar.TypeDir, Mode: 0o755}
}

// RemoveAll drops p and everything below it.
func (t *Tree) RemoveAll(p string) {
	delete(t.nodes, p)
	prefix := p + "/"
	for q := range t.nodes {
		if strings.HasPrefix(q, prefix) {
			delete(t.nodes, q)
		}
	}
}

// Paths lists every path but "/", sorted, so a directory comes before
// what it holds.
func (t *Tree) Paths() []string {
	out := make([]string, 0, len(t.nodes))
	for p := range t.nodes {
		if p != "/" {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// Children lists the names directly below directory p, sorted.
func (t *Tree) Children(p string) []string {
	prefix := strings.TrimSuffix(p, "/") + "/"
	var out []string
	for q := range t.nodes {
		if strings.HasPrefix(q, prefix) && !strings.Contains(q[len(prefix):], "/") {
			out = append(out, q[len(prefix):])
		}
	}
	sort.Strings(out)
	return out
}

// maxLinks bounds symlink resolution, as the kernel's ELOOP does.
const maxLinks = 40

// Resolve follows p through the tree with chroot semantics (absolute
// link targets restart at "/", ".." stops there) and returns the path it
// lands on and its node (nil when it does not exist).
func (t *Tree) Resolve(p string) (string, *Node, error) {
	return t.resolve(p, true)
}

// ResolveParent resolves every component of p but the last.
func (t *Tree) ResolveParent(p string) (string, error) {
	q, _, err := t.resolve(p, false)
	return q, err
}

func (t *Tree) resolve(p string, followLast bool) (string, *Node, error) {
	links := 0
	todo := splitPath(p)
	cur := "/"
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, c)
		n := t.nodes[next]
		if n != nil && n.Type == tar.TypeSymlink && (followLast || len(todo) > 0) {
			links++
			if links > maxLinks {
				return "", nil, fmt.Errorf("%s: too many levels of symbolic links", p)
			}
			if strings.HasPrefix(n.Link, "/") {
				cur = "/"
			}
			todo = append(splitPath(n.Link), todo...)
			continue
		}
		cur = next
	}
	return cur, t.nodes[cur], nil
}

func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// linkGroup returns a fresh hard-link group id.
func (t *Tree) linkGroup() int {
	t.nextID++
	return t.nextID
}

// AddHeader applies one tar entry of an OCI layer to a header-only tree
// (for the contract): whiteouts remove, everything else is recorded
// without content.
func (t *Tree) AddHeader(h *tar.Header) error {
	name := path.Clean("/" + h.Name)
	dir, base := path.Split(name)
	dir = path.Clean(dir)
	switch {
	case base == ".wh..wh..opq":
		for _, c := range t.Children(dir) {
			t.RemoveAll(path.Join(dir, c))
		}
		return nil
	case strings.HasPrefix(base, ".wh."):
		t.RemoveAll(path.Join(dir, strings.TrimPrefix(base, ".wh.")))
		return nil
	}
	n := &Node{Type: h.Typeflag, Mode: h.Mode & 0o7777, UID: h.Uid, GID: h.Gid, Link: h.Linkname, Size: h.Size}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeRegA:
		n.Type = tar.TypeReg
	case tar.TypeLink:
		src := t.nodes[path.Clean("/"+h.Linkname)]
		if src == nil {
			return fmt.Errorf("%s: hard link to %s, which the layer has not written", h.Name, h.Linkname)
		}
		c := *src
		n = &c
	case tar.TypeDir, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
	default:
		return nil
	}
	t.Put(name, n)
	return nil
}
