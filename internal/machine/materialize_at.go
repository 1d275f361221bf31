package machine

import (
	"archive/tar"
	"errors"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/Azure/aks-flex-node/internal/artifact"
)

// Making a rootfs through os.Root resolves every path component by
// component, for each of the several calls an entry takes: on the 6,000
// entries of the Debian worker image that walk was two thirds of the
// time. dirFDs keeps a descriptor of each directory reached, opened from
// its parent's with O_NOFOLLOW, so an entry costs one *at call per step.
// A directory reached through a symlink (or missing) gets no descriptor,
// and the entry goes through the Root as before: the fast path never
// resolves a link at all, so it confines at least as well as the Root.

// maxDirFDs bounds the open descriptors; past it they are dropped and
// reopened as needed.
const maxDirFDs = 2048

type dirFDs struct {
	root *os.File // the machines dir
	fds  map[string]int
}

func newDirFDs(root *os.Root) (*dirFDs, error) {
	f, err := root.OpenFile(".", os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	return &dirFDs{root: f, fds: map[string]int{}}, nil
}

// get returns the descriptor of directory rel (slash-separated, below
// the root), opening it and its ancestors as needed; false when a
// component is not a directory.
func (d *dirFDs) get(rel string) (int, bool) {
	if rel == "." || rel == "" {
		return int(d.root.Fd()), true
	}
	if fd, ok := d.fds[rel]; ok {
		return fd, true
	}
	parent, ok := d.get(path.Dir(rel))
	if !ok {
		return -1, false
	}
	fd, err := unix.Openat(parent, path.Base(rel), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, false
	}
	if len(d.fds) >= maxDirFDs {
		d.drop(func(string) bool { return true })
	}
	d.fds[rel] = fd
	return fd, true
}

// forget drops the descriptors of rel and every directory below it:
// they are about to be removed.
func (d *dirFDs) forget(rel string) {
	d.drop(func(k string) bool { return k == rel || strings.HasPrefix(k, rel+"/") })
}

func (d *dirFDs) drop(match func(string) bool) {
	for k, fd := range d.fds {
		if match(k) {
			unix.Close(fd)
			delete(d.fds, k)
		}
	}
}

func (d *dirFDs) close() {
	d.drop(func(string) bool { return true })
	d.root.Close()
}

// entryAt is entry for an entry whose directory in dst, dfd, is open
// (and, for a regular file, whose directory in the cache, sfd). It does
// what entry does, with the same checks.
func (m *materializer) entryAt(e *cacheEntry, dfd, sfd int, dst string, x *indexEntry) error {
	name := path.Base(dst)
	var st unix.Stat_t
	err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && x.Type == tar.TypeDir:
		return m.metaAt(dfd, name, x)
	case err == nil:
		m.fds.forget(dst)
		if err := m.root.RemoveAll(dst); err != nil {
			return err
		}
	case !errors.Is(err, unix.ENOENT):
		return err
	}
	switch x.Type {
	case tar.TypeDir:
		if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
			return err
		}
		m.dirs = append(m.dirs, dirTimes{dst, x.Mtime})
		return m.metaAt(dfd, name, x)
	case tar.TypeSymlink:
		m.other++
		if err := unix.Symlinkat(x.Link, dfd, name); err != nil {
			return err
		}
		if m.chown {
			return unix.Fchownat(dfd, name, x.UID, x.GID, unix.AT_SYMLINK_NOFOLLOW)
		}
		return nil
	case tar.TypeReg:
		return m.fileAt(e, sfd, dfd, name, x)
	default:
		m.other++
		return m.node(dst, x)
	}
}

// fileAt is file through open directories.
func (m *materializer) fileAt(e *cacheEntry, sfd, dfd int, name string, x *indexEntry) error {
	var st unix.Stat_t
	if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	cur := artifact.FileStamp{Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(), Ino: st.Ino, Dev: uint64(st.Dev)} //nolint:unconvert // Dev is uint32 on some arches
	if st.Mode&unix.S_IFMT != unix.S_IFREG || m.cacheChanged(x, cur, st.Mode&0o7777) {
		return &errCacheChanged{entry: e, path: x.Path}
	}
	if m.mode == modeReflink {
		err := m.copyFileAt(sfd, dfd, name, x, true)
		if err == nil || !unsupported(err) {
			return err
		}
		_ = unix.Unlinkat(dfd, name, 0)
		m.mode = modeHardlink
	}
	if m.mode == modeHardlink && strings.HasPrefix(x.Path, "usr/") {
		err := unix.Linkat(sfd, name, dfd, name, 0)
		if err == nil {
			m.linkedOne(cur)
			return nil
		}
		if !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EMLINK) {
			return err
		}
		m.mode = modeCopy
	}
	return m.copyFileAt(sfd, dfd, name, x, false)
}

// copyFileAt is copyFile through open directories.
func (m *materializer) copyFileAt(sfd, dfd int, name string, x *indexEntry, clone bool) error {
	ifd, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	in := os.NewFile(uintptr(ifd), name)
	defer in.Close()
	ofd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	out := os.NewFile(uintptr(ofd), name)
	defer out.Close()
	if err := m.fill(in, out, x, clone); err != nil {
		return err
	}
	ts := unix.NsecToTimespec(x.Mtime)
	return unix.UtimesNanoAt(dfd, name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}

// metaAt is meta through an open directory.
func (m *materializer) metaAt(dfd int, name string, x *indexEntry) error {
	if m.chown {
		if err := unix.Fchownat(dfd, name, x.UID, x.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	return unix.Fchmodat(dfd, name, x.Mode&0o7777, 0)
}
