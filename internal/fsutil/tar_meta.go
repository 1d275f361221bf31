package fsutil

import (
	"archive/tar"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
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
	at, mt := times(hdr)
	return os.Chtimes(p, at, mt)
}

// times are the entry's access and modification times; an archive
// without them gets the epoch.
func times(hdr *tar.Header) (at, mt time.Time) {
	mt = hdr.ModTime
	if mt.IsZero() {
		mt = time.Unix(0, 0)
	}
	at = hdr.AccessTime
	if at.IsZero() {
		at = mt
	}
	return at, mt
}

const paxXattr = "SCHILY.xattr."

// setXattrs applies the entry's extended attributes. p was just created
// by this extraction and is never a symlink here, so the following
// Setxattr is safe.
func setXattrs(p string, hdr *tar.Header) error {
	return eachXattr(hdr, func(name string, v []byte) error { return unix.Setxattr(p, name, v, 0) })
}

// setXattrsFd is setXattrs through a file descriptor.
func setXattrsFd(fd int, hdr *tar.Header) error {
	return eachXattr(hdr, func(name string, v []byte) error { return unix.Fsetxattr(fd, name, v, 0) })
}

// eachXattr calls set for each of the entry's extended attributes. A
// filesystem without xattr support is not an error: the rootfs is still
// usable without them.
func eachXattr(hdr *tar.Header, set func(name string, v []byte) error) error {
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, paxXattr)
		if !ok || name == "" {
			continue
		}
		if err := set(name, []byte(v)); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
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
// changes a directory's mtime, and a read-only mode would stop them. Each
// directory is reached again from the root one component at a time with
// O_NOFOLLOW, and changed through its file descriptor: a directory a
// later entry replaced or removed (a symlink "etc -> /host/file" after
// "etc/") is skipped, since what replaced it got its own metadata.
func (x *extractor) finish() error {
	if len(x.dirs) == 0 {
		return nil
	}
	top, err := unix.Open(x.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("extract into %s: %w", x.root, err)
	}
	defer unix.Close(top)
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := x.dirMeta(top, d.rel, d.hdr); err != nil {
			return fmt.Errorf("extract into %s: %s: %w", x.root, d.hdr.Name, err)
		}
	}
	return nil
}

// dirMeta applies hdr to the directory at rel below the root (open as
// top) if it is still a directory reached without a link.
func (x *extractor) dirMeta(top int, rel string, hdr *tar.Header) error {
	fd := top
	if rel != "" {
		var err error
		fd, err = openNoFollow(top, rel)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil // replaced or removed by a later entry
		}
		if err != nil {
			return err
		}
		defer unix.Close(fd)
	}
	if x.chown {
		if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
	}
	// After chown, which clears security.capability.
	if err := setXattrsFd(fd, hdr); err != nil {
		return err
	}
	// Times through "." from the directory's own descriptor (that
	// directory), before the mode: "." needs search permission, which the
	// archive's mode may take away.
	at, mt := times(hdr)
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(mt.UnixNano())}
	if err := unix.UtimesNanoAt(fd, ".", ts, 0); err != nil {
		return err
	}
	// Last, as chown clears setuid/setgid.
	return unix.Fchmod(fd, uint32(hdr.Mode&0o7777))
}

// openNoFollow opens the directory rel below top, every component with
// O_NOFOLLOW|O_DIRECTORY: a link anywhere on the way fails with ELOOP or
// ENOTDIR.
func openNoFollow(top int, rel string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd := top
	for _, c := range strings.Split(rel, "/") {
		next, err := unix.Openat(fd, c, flags, 0)
		if fd != top {
			unix.Close(fd)
		}
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}
