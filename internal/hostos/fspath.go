package hostos

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"

	"github.com/Azure/aks-flex-node/internal/fsroot"
)

func normRoot(root string) string {
	if root == "" {
		return "/"
	}
	return filepath.Clean(root)
}

// openRegular refuses anything but a regular file: opening a FIFO planted
// where a config file should be would block the probe forever.
func openRegular(p string) (*os.File, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", p, fi.Mode().Type())
	}
	return os.Open(p)
}

// NearestExistingAncestor returns dir itself if it exists inside p.Root,
// else its closest existing parent: the directory a "mkdir -p" of dir would
// have to write into. It looks and never creates; the result is a path as
// seen from inside the root.
func (p *Prober) NearestExistingAncestor(dir string) (string, error) {
	if !path.IsAbs(dir) {
		return "", fmt.Errorf("nearest existing ancestor of %q: path is not absolute", dir)
	}
	cur := path.Clean(dir)
	for {
		host, err := fsroot.Resolve(p.root(), cur)
		if err == nil {
			_, err = os.Stat(host)
		}
		if err == nil {
			return cur, nil
		}
		// ENOTDIR: a file sits where a directory component should be;
		// that file is the nearest thing that exists.
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return "", fmt.Errorf("nearest existing ancestor of %s: %w", dir, err)
		}
		if cur == "/" {
			return "", fmt.Errorf("nearest existing ancestor of %s: %s does not exist: %w", dir, p.root(), err)
		}
		cur = path.Dir(cur)
	}
}

// DirCheck is the evidence behind CheckDir's answer, for messages that
// must say what was looked at.
type DirCheck struct {
	Path     string // as asked, inside the root
	Resolved string // after symlinks, inside the root
	Writable bool
	Mount    *Mount // covering mount; nil when the mount table was not read
	Reason   string // why it is not writable; empty when it is
}

// CheckDir reports whether entries can be created in the existing
// directory dir inside p.Root. It never creates anything: it asks access(2)
// for W_OK, which also fails with EROFS on a read-only filesystem, and
// checks the covering mount's ro flag so a read-only bind mount is caught
// the same way. The mount table is consulted only when it describes this
// root (see Prober); access(2) is always asked.
func (p *Prober) CheckDir(dir string) (DirCheck, error) {
	c := DirCheck{Path: dir}
	host, err := fsroot.Resolve(p.root(), dir)
	if err != nil {
		return c, fmt.Errorf("check %s: %w", dir, err)
	}
	rel := fsroot.Within(p.root(), host)
	c.Resolved = rel
	fi, err := os.Stat(host)
	if err != nil {
		return c, fmt.Errorf("check %s: %w", dir, err)
	}
	if !fi.IsDir() {
		c.Reason = fmt.Sprintf("%s is not a directory", rel)
		return c, nil
	}
	if mounts, err := p.Mounts(); err == nil {
		m := MountFor(mounts, rel)
		c.Mount = &m
		if m.ReadOnly() {
			c.Reason = fmt.Sprintf("%s is on read-only mount %s (%s %s)", rel, m.MountPoint, m.FSType, m.Source)
			return c, nil
		}
	}
	switch err := syscall.Access(host, 0x2 /* W_OK */); {
	case err == nil:
		c.Writable = true
	case errors.Is(err, syscall.EROFS):
		c.Reason = fmt.Sprintf("%s is on a read-only filesystem", rel)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		c.Reason = fmt.Sprintf("%s: write access denied (%v)", rel, err)
	default:
		return c, fmt.Errorf("check %s: access: %w", dir, err)
	}
	return c, nil
}
