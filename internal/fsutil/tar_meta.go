package fsutil

import (
	"archive/tar"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"
)

// meta applies owner, mode and mtime. chown comes before chmod because
// chown clears setuid/setgid bits.
func (x *extractor) meta(p string, hdr *tar.Header) error {
	isLink := hdr.Typeflag == tar.TypeSymlink
	if x.chown {
		if err := os.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
	}
	if isLink {
		// Symlink modes are meaningless on Linux and os.Chtimes would
		// follow the link; leave both.
		return nil
	}
	if err := os.Chmod(p, tarMode(hdr)); err != nil {
		return err
	}
	// After chown, which clears security.capability: file capabilities
	// (ping, newuidmap) travel as PAX xattr records.
	if err := setXattrs(p, hdr); err != nil {
		return err
	}
	mt := hdr.ModTime
	if mt.IsZero() {
		mt = time.Unix(0, 0)
	}
	at := hdr.AccessTime
	if at.IsZero() {
		at = mt
	}
	return os.Chtimes(p, at, mt)
}

const paxXattr = "SCHILY.xattr."

// setXattrs applies the entry's extended attributes. p is never a symlink
// here, so the following Setxattr is safe. A filesystem without xattr
// support is not an error: the rootfs is still usable without them.
func setXattrs(p string, hdr *tar.Header) error {
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, paxXattr)
		if !ok || name == "" {
			continue
		}
		if err := syscall.Setxattr(p, name, []byte(v), 0); err != nil {
			if errors.Is(err, syscall.ENOTSUP) {
				continue
			}
			return fmt.Errorf("set xattr %s: %w", name, err)
		}
	}
	return nil
}

func tarMode(hdr *tar.Header) fs.FileMode {
	m := fs.FileMode(hdr.Mode & 0o777)
	if hdr.Mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if hdr.Mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if hdr.Mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// finish applies directory metadata last, deepest first: creating children
// changes a directory's mtime, and a read-only mode would stop them.
func (x *extractor) finish() error {
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := x.meta(d.path, d.hdr); err != nil {
			return fmt.Errorf("extract into %s: %s: %w", x.root, d.hdr.Name, err)
		}
	}
	return nil
}
