package machine

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/Azure/aks-flex-node/internal/artifact"
)

// A machine rootfs is made from cached layers (layercache.go) without
// decompressing anything. How, measured on this project's Debian worker
// image (6,000 entries, 144 MB; docs/guide/worker-images.md):
//
//   - reflink (FICLONE), where the file system has it (btrfs, XFS): every
//     file is its own copy-on-write clone, sharing blocks with the cache;
//   - else hard links for the regular files under /usr, which is nearly all
//     of the bytes and which nothing in a running node writes in place
//     (package upgrades replace files by rename), and plain copies of
//     everything else (/etc and /var are written in place: passwd, the
//     journal, containerd's state);
//   - else (the cache on another mount than the rootfs) copies.
//
// Not an overlay: it would have to be mounted again before every boot of
// the machine, and containerd's overlayfs snapshotter cannot put its
// layers on overlayfs, so /var/lib/containerd would need yet another
// mount. The rootfs made here is a plain directory on the host's file
// system.
//
// A shared file written in place would change the cache under every
// machine made from it: before a file is linked or copied again, its
// stamp (device, inode, size, mtime, ctime: layercache.go) and mode are
// checked against the index, and a cache entry that changed is thrown
// away and extracted again.

// linkMode is how a rootfs is made from the cache.
type linkMode int

const (
	modeReflink linkMode = iota
	modeHardlink
	modeCopy
)

func (m linkMode) String() string {
	return [...]string{"reflink", "hardlink", "copy"}[m]
}

// errCacheChanged is a cached file that is not what the index recorded.
type errCacheChanged struct {
	entry *cacheEntry
	path  string
}

func (e *errCacheChanged) Error() string {
	return fmt.Sprintf("cached layer %s: %s changed since it was extracted", e.entry.DiffID, e.path)
}

// materializer makes one rootfs in dst from entries, layer by layer.
type materializer struct {
	root *os.Root // the machines dir: the cache and dst are both below it
	fds  *dirFDs  // open directories below root (materialize_at.go)
	dst  string   // dst relative to root
	mode linkMode
	// chown sets owners (root only; tests run as anyone).
	chown bool
	// counts for the log line
	linked, copied, other int
	// dirs whose metadata is set last, deepest first
	dirs []dirTimes
	// linkedNow are the cached inodes this run linked (device, inode): a
	// layer's own hard links (usr/bin/perl and perl5.36.0) are one inode,
	// whose ctime the first link moved after its check passed.
	linkedNow map[[2]uint64]bool
}

// cacheChanged says the cached file x, whose stamp is now cur and whose
// permission bits are mode, is not what the index recorded; for an inode
// this run linked already, its ctime is not compared (the link moved it).
func (m *materializer) cacheChanged(x *indexEntry, cur artifact.FileStamp, mode uint32) bool {
	if m.linkedNow[[2]uint64{cur.Dev, cur.Ino}] && x.Stamp != nil {
		cur.Ctime = x.Stamp.Ctime
	}
	return !x.unchanged(cur, mode)
}

// linkedOne counts a hard link of the cached inode cur.
func (m *materializer) linkedOne(cur artifact.FileStamp) {
	if m.linkedNow == nil {
		m.linkedNow = map[[2]uint64]bool{}
	}
	m.linkedNow[[2]uint64{cur.Dev, cur.Ino}] = true
	m.linked++
}

type dirTimes struct {
	rel   string
	mtime int64
}

// materialize makes dst (a fresh directory below machinesDir) the merged
// tree of entries, in order, choosing the cheapest way the file system
// allows (probeMode). It returns the mode used.
func materialize(machinesDir, dst string, entries []*cacheEntry, want linkMode) (linkMode, int, error) {
	root, err := os.OpenRoot(machinesDir)
	if err != nil {
		return 0, 0, err
	}
	defer root.Close()
	rel, err := filepath.Rel(machinesDir, dst)
	if err != nil || strings.HasPrefix(rel, "..") {
		return 0, 0, fmt.Errorf("rootfs %s is not below %s", dst, machinesDir)
	}
	fds, err := newDirFDs(root)
	if err != nil {
		return 0, 0, err
	}
	defer fds.close()
	m := &materializer{root: root, fds: fds, dst: rel, mode: want, chown: os.Geteuid() == 0}
	for _, e := range entries {
		cacheRel, err := filepath.Rel(machinesDir, e.tree())
		if err != nil || strings.HasPrefix(cacheRel, "..") {
			return 0, 0, fmt.Errorf("layer cache %s is not below %s", e.tree(), machinesDir)
		}
		if err := m.layer(e, cacheRel); err != nil {
			return m.mode, 0, err
		}
	}
	for i := len(m.dirs) - 1; i >= 0; i-- {
		d := m.dirs[i]
		if fd, ok := fds.get(path.Dir(d.rel)); ok {
			ts := unix.NsecToTimespec(d.mtime)
			_ = unix.UtimesNanoAt(fd, path.Base(d.rel), []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
			continue
		}
		t := time.Unix(0, d.mtime)
		_ = root.Chtimes(d.rel, t, t)
	}
	return m.mode, m.linked + m.copied + m.other, nil
}

// layer applies one cached layer: its whiteouts first (they remove what
// lower layers put there), then its entries.
func (m *materializer) layer(e *cacheEntry, cacheRel string) error {
	for _, x := range e.Entries {
		dir, base := path.Split(x.Path)
		switch {
		case base == ".wh..wh..opq":
			if err := m.clearDir(strings.TrimSuffix(dir, "/")); err != nil {
				return err
			}
		case strings.HasPrefix(base, ".wh."):
			if err := m.whiteout(path.Join(dir, strings.TrimPrefix(base, ".wh."))); err != nil {
				return err
			}
		}
	}
	for i := range e.Entries {
		x := &e.Entries[i]
		if strings.HasPrefix(path.Base(x.Path), ".wh.") {
			continue
		}
		if err := m.entry(e, cacheRel, x); err != nil {
			if _, ok := err.(*errCacheChanged); ok {
				return err
			}
			return fmt.Errorf("%s: %w", x.Path, err)
		}
	}
	return nil
}

func (m *materializer) at(rel string) string { return path.Join(m.dst, rel) }

// realDir reports whether every component of rel in dst is a directory,
// not a link: only then is a whiteout below it applied, so that removing
// a lower layer's file never follows a link.
func (m *materializer) realDir(rel string) bool {
	p := m.dst
	for _, c := range strings.Split(rel, "/") {
		if c == "" {
			continue
		}
		p = path.Join(p, c)
		fi, err := m.root.Lstat(p)
		if err != nil || !fi.IsDir() {
			return false
		}
	}
	return true
}

func (m *materializer) whiteout(rel string) error {
	if !m.realDir(path.Dir(rel)) {
		return nil
	}
	m.fds.forget(m.at(rel))
	return m.root.RemoveAll(m.at(rel))
}

func (m *materializer) clearDir(rel string) error {
	if !m.realDir(rel) {
		return nil
	}
	d, err := m.root.Open(m.at(rel))
	if err != nil {
		return nil
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		m.fds.forget(m.at(path.Join(rel, n)))
		if err := m.root.RemoveAll(m.at(path.Join(rel, n))); err != nil {
			return err
		}
	}
	return nil
}

// entry puts one cached entry at its place in dst, replacing what a lower
// layer put there (a directory stays a directory and takes the upper
// metadata).
func (m *materializer) entry(e *cacheEntry, cacheRel string, x *indexEntry) error {
	dst := m.at(x.Path)
	src := path.Join(cacheRel, x.Path)
	if dfd, ok := m.fds.get(path.Dir(dst)); ok {
		sfd, ok := -1, true
		if x.Type == tar.TypeReg {
			sfd, ok = m.fds.get(path.Dir(src))
		}
		if ok {
			return m.entryAt(e, dfd, sfd, dst, x)
		}
	}
	old, err := m.root.Lstat(dst)
	switch {
	case err == nil && old.IsDir() && x.Type == tar.TypeDir:
		return m.meta(dst, x, true)
	case err == nil:
		m.fds.forget(dst)
		if err := m.root.RemoveAll(dst); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	switch x.Type {
	case tar.TypeDir:
		if err := m.root.Mkdir(dst, 0o700); err != nil {
			return err
		}
		m.dirs = append(m.dirs, dirTimes{dst, x.Mtime})
		return m.meta(dst, x, true)
	case tar.TypeSymlink:
		m.other++
		if err := m.root.Symlink(x.Link, dst); err != nil {
			return err
		}
		if m.chown {
			return m.root.Lchown(dst, x.UID, x.GID)
		}
		return nil
	case tar.TypeReg:
		return m.file(e, src, dst, x)
	default:
		m.other++
		return m.node(dst, x)
	}
}

// file puts a regular file: a reflink, a hard link for a file under /usr,
// or a copy; the mode falls back (reflink -> hardlink -> copy) the first
// time the file system says it cannot.
func (m *materializer) file(e *cacheEntry, src, dst string, x *indexEntry) error {
	fi, err := m.root.Lstat(src)
	if err != nil {
		return err
	}
	cur, ok := artifact.StampOf("", fi)
	if !ok || !fi.Mode().IsRegular() || m.cacheChanged(x, cur, modeBits(fi.Mode())) {
		return &errCacheChanged{entry: e, path: x.Path}
	}
	if m.mode == modeReflink {
		err := m.copyFile(src, dst, x, true)
		if err == nil || !unsupported(err) {
			return err
		}
		_ = m.root.Remove(dst)
		m.mode = modeHardlink
	}
	if m.mode == modeHardlink && strings.HasPrefix(x.Path, "usr/") {
		err = m.root.Link(src, dst)
		if err == nil {
			m.linkedOne(cur)
			return nil
		}
		if !errors.Is(err, syscall.EXDEV) && !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EMLINK) {
			return err
		}
		m.mode = modeCopy
	}
	return m.copyFile(src, dst, x, false)
}

// unsupported reports a file system that cannot reflink.
func unsupported(err error) bool {
	return errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EINVAL) ||
		errors.Is(err, syscall.ENOTTY) || errors.Is(err, syscall.ENOSYS)
}

// copyFile copies (or, with clone, reflinks) src to dst with x's mode,
// owner, mtime and the source's extended attributes.
func (m *materializer) copyFile(src, dst string, x *indexEntry, clone bool) error {
	in, err := m.root.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := m.root.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := m.fill(in, out, x, clone); err != nil {
		return err
	}
	t := time.Unix(0, x.Mtime)
	return m.root.Chtimes(dst, t, t)
}

// fill gives the new file out in's content (copied, or with clone
// reflinked) and extended attributes, and x's owner and mode, and closes
// it: what copyFile and copyFileAt share once both files are open. The
// mtime is left to the caller, which set it by the path it opened out by.
func (m *materializer) fill(in, out *os.File, x *indexEntry, clone bool) error {
	if clone {
		if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err != nil {
			return err
		}
	} else if _, err := io.Copy(out, in); err != nil {
		return err
	}
	copyXattrs(in, out)
	if m.chown {
		if err := out.Chown(x.UID, x.GID); err != nil {
			return err
		}
	}
	if err := out.Chmod(fileMode(x.Mode)); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	m.copied++
	return nil
}

// copyXattrs copies the extended attributes a layer gave a file (file
// capabilities, mostly); a file system without them has none to copy.
func copyXattrs(in, out *os.File) {
	buf := make([]byte, 4096)
	n, err := unix.Flistxattr(int(in.Fd()), buf)
	if err != nil || n <= 0 {
		return
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		val := make([]byte, 64<<10)
		vn, err := unix.Fgetxattr(int(in.Fd()), name, val)
		if err == nil {
			_ = unix.Fsetxattr(int(out.Fd()), name, val[:vn], 0)
		}
	}
}

// node makes a device or fifo, through a descriptor of its directory.
func (m *materializer) node(dst string, x *indexEntry) error {
	d, err := m.root.OpenFile(path.Dir(dst), os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	mode := uint32(syscall.S_IFIFO)
	switch x.Type {
	case tar.TypeChar:
		mode = syscall.S_IFCHR
	case tar.TypeBlock:
		mode = syscall.S_IFBLK
	}
	if err := unix.Mknodat(int(d.Fd()), path.Base(dst), mode|x.Mode&0o7777, int(x.Rdev)); err != nil {
		return err
	}
	return m.meta(dst, x, false)
}

// meta sets owner and mode (a directory's mtime is set last).
func (m *materializer) meta(dst string, x *indexEntry, dir bool) error {
	if m.chown {
		if err := m.root.Lchown(dst, x.UID, x.GID); err != nil {
			return err
		}
	}
	return m.root.Chmod(dst, fileMode(x.Mode))
}

// fileMode turns Unix mode bits into an fs.FileMode for Chmod.
func fileMode(b uint32) fs.FileMode {
	m := fs.FileMode(b & 0o777)
	if b&syscall.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if b&syscall.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if b&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}
