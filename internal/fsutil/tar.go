package fsutil

import (
	"archive/tar"
	"compress/gzip"
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
)

// ExtractOptions select what ExtractTar does beyond plain files, dirs and
// links.
type ExtractOptions struct {
	// Whiteouts applies OCI layer semantics: ".wh.<name>" deletes <name>
	// from lower layers and ".wh..wh..opq" empties its directory of
	// everything lower layers put there. Without it such entries are
	// ordinary files.
	Whiteouts bool
	// Devices creates character and block devices and fifos (a machine
	// rootfs). Without it those entries are skipped: an artifact tarball
	// has no business shipping them.
	Devices bool
	// NoChown keeps the extracting user as owner. Otherwise, when running
	// as root, entries get the archive's uid/gid.
	NoChown bool
}

const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
	// maxLinkFollows bounds symlink resolution inside dest, as the kernel
	// bounds it (ELOOP), so a link cycle in an archive cannot hang us.
	maxLinkFollows = 255
)

// ExtractTar unpacks the tar stream r into the directory dest, which must
// exist.
//
// Nothing is ever written outside dest:
//   - entry names that are absolute or contain a ".." component are
//     rejected;
//   - parent directories are resolved one component at a time with Lstat;
//     a symlink met on the way is resolved by this code as it would be
//     inside a chroot at dest (absolute targets from dest, ".." clamped at
//     dest), never by the kernel, so "a -> /etc" followed by "a/passwd"
//     writes dest/etc/passwd;
//   - the entry itself is created with O_NOFOLLOW after removing whatever
//     was there, so an existing symlink is replaced, not written through;
//   - a symlink whose target, read relative to the link's directory
//     (absolute targets relative to dest), climbs above dest is rejected,
//     as is a hardlink to anything outside dest.
//
// Absolute symlink targets are kept verbatim: inside a machine rootfs they
// resolve inside the machine.
func ExtractTar(r io.Reader, dest string, opts ExtractOptions) error {
	fi, err := os.Stat(dest)
	if err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("extract: %s is not a directory", dest)
	}
	x := &extractor{
		root:    filepath.Clean(dest),
		opts:    opts,
		chown:   !opts.NoChown && os.Geteuid() == 0,
		written: map[string]bool{},
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("extract into %s: read tar: %w", dest, err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return fmt.Errorf("extract into %s: %s: %w", dest, hdr.Name, err)
		}
	}
	return x.finish()
}

type dirMeta struct {
	path string
	hdr  *tar.Header
}

type extractor struct {
	root  string
	opts  ExtractOptions
	chown bool
	// written holds every archive path (cleaned, relative) this extraction
	// created, plus their parents, so whiteouts only remove what lower
	// layers put there (OCI image-spec, "Whiteouts").
	written map[string]bool
	dirs    []dirMeta
}

// cleanName turns an archive name into a clean relative path, "" for the
// root itself.
func cleanName(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty name")
	}
	if strings.HasPrefix(name, "/") {
		return "", errors.New("absolute path in archive")
	}
	if strings.ContainsRune(name, 0) {
		return "", errors.New("NUL in name")
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", errors.New("'..' in archive path")
		}
	}
	p := path.Clean(name)
	if p == "." {
		return "", nil
	}
	return p, nil
}

func (x *extractor) markWritten(rel string) {
	for p := rel; p != "." && p != "" && p != "/"; p = path.Dir(p) {
		x.written[p] = true
	}
}

func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	rel, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if rel == "" {
		if hdr.Typeflag == tar.TypeDir {
			x.dirs = append(x.dirs, dirMeta{x.root, hdr})
		}
		return nil
	}
	dirRel, base := path.Dir(rel), path.Base(rel)
	if dirRel == "." {
		dirRel = ""
	}

	if x.opts.Whiteouts && strings.HasPrefix(base, whiteoutPrefix) {
		return x.whiteout(dirRel, base)
	}

	parent, err := x.mkdirResolved(dirRel)
	if err != nil {
		return err
	}
	target := filepath.Join(parent, base)

	switch hdr.Typeflag {
	case tar.TypeDir:
		fi, err := os.Lstat(target)
		if err == nil && !fi.IsDir() {
			if err := os.RemoveAll(target); err != nil {
				return err
			}
		}
		if err != nil || !fi.IsDir() {
			// Owner-writable until finish() applies the archive's mode,
			// so a 0555 directory can still receive its children.
			if err := os.Mkdir(target, 0o700); err != nil {
				return err
			}
		}
		x.dirs = append(x.dirs, dirMeta{target, hdr})
		x.markWritten(rel)
		return nil
	case tar.TypeReg, tar.TypeGNUSparse:
		if err := replace(target); err != nil {
			return err
		}
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	case tar.TypeSymlink:
		if err := checkSymlink(rel, hdr.Linkname); err != nil {
			return err
		}
		if err := replace(target); err != nil {
			return err
		}
		if err := os.Symlink(hdr.Linkname, target); err != nil {
			return err
		}
	case tar.TypeLink:
		src, err := x.hardlinkSource(hdr.Linkname)
		if err != nil {
			return err
		}
		if src == target {
			x.markWritten(rel)
			return nil
		}
		if err := replace(target); err != nil {
			return err
		}
		// link(2) without AT_SYMLINK_FOLLOW links a symlink itself, not
		// what it points to.
		if err := os.Link(src, target); err != nil {
			return err
		}
		// A hardlink shares the inode: metadata is already the source's.
		x.markWritten(rel)
		return nil
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		if !x.opts.Devices {
			return nil
		}
		if err := replace(target); err != nil {
			return err
		}
		mode := uint32(hdr.Mode & 0o7777)
		switch hdr.Typeflag {
		case tar.TypeChar:
			err = syscall.Mknod(target, mode|syscall.S_IFCHR, mkdev(hdr.Devmajor, hdr.Devminor))
		case tar.TypeBlock:
			err = syscall.Mknod(target, mode|syscall.S_IFBLK, mkdev(hdr.Devmajor, hdr.Devminor))
		default:
			err = syscall.Mkfifo(target, mode)
		}
		if err != nil {
			return err
		}
	case tar.TypeXHeader, tar.TypeXGlobalHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
		return nil // consumed by archive/tar; never returned in practice
	default:
		return fmt.Errorf("unsupported tar entry type %q", hdr.Typeflag)
	}
	x.markWritten(rel)
	return x.meta(target, hdr)
}

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

// replace removes whatever is at p (file, link, or directory tree) so the
// new entry is created fresh; an existing symlink is removed, never
// followed.
func replace(p string) error {
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	return os.RemoveAll(p)
}

// checkSymlink rejects a link whose target, read relative to the link's
// directory, climbs out of the archive root. Absolute targets start at the
// root and so cannot.
func checkSymlink(rel, target string) error {
	if target == "" {
		return errors.New("symlink with empty target")
	}
	if strings.HasPrefix(target, "/") {
		return nil
	}
	depth := strings.Count(rel, "/") // directories between root and the link
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return fmt.Errorf("symlink target %q escapes the extraction root", target)
			}
		default:
			depth++
		}
	}
	return nil
}

func (x *extractor) hardlinkSource(linkname string) (string, error) {
	rel, err := cleanName(linkname)
	if err != nil {
		return "", fmt.Errorf("hardlink target %q: %w", linkname, err)
	}
	if rel == "" {
		return "", fmt.Errorf("hardlink to the extraction root")
	}
	dirRel, base := path.Dir(rel), path.Base(rel)
	if dirRel == "." {
		dirRel = ""
	}
	dir, err := x.resolve(dirRel)
	if err != nil {
		return "", fmt.Errorf("hardlink target %q: %w", linkname, err)
	}
	src := filepath.Join(dir, base)
	fi, err := os.Lstat(src)
	if err != nil {
		return "", fmt.Errorf("hardlink target %q: %w", linkname, err)
	}
	if fi.IsDir() {
		return "", fmt.Errorf("hardlink target %q is a directory", linkname)
	}
	return src, nil
}

func (x *extractor) whiteout(dirRel, base string) error {
	dir, err := x.resolve(dirRel)
	if err != nil {
		return err
	}
	if base == whiteoutOpaque {
		return x.opaque(dir, dirRel)
	}
	name := strings.TrimPrefix(base, whiteoutPrefix)
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("invalid whiteout %q", base)
	}
	if x.written[path.Join(dirRel, name)] {
		return nil // whiteouts hide lower layers, not this one
	}
	return replace(filepath.Join(dir, name))
}

// opaque removes from dir everything this extraction did not write.
func (x *extractor) opaque(dir, dirRel string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		rel := path.Join(dirRel, e.Name())
		p := filepath.Join(dir, e.Name())
		switch {
		case !x.written[rel]:
			if err := os.RemoveAll(p); err != nil {
				return err
			}
		case e.IsDir():
			if err := x.opaque(p, rel); err != nil {
				return err
			}
		}
	}
	return nil
}

// resolve maps a clean relative path to a host path inside root, resolving
// symlinks on the way as a chroot at root would. Missing components are
// kept as they are.
func (x *extractor) resolve(rel string) (string, error) {
	return resolveInRoot(x.root, rel)
}

// resolveInRoot is resolve for any root.
func resolveInRoot(root, rel string) (string, error) {
	queue := splitPath(rel)
	resolved := "" // relative to root, clean
	follows := 0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if d := path.Dir(resolved); d == "." || d == "/" {
				resolved = ""
			} else {
				resolved = d
			}
			continue
		}
		next := path.Join(resolved, c)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				resolved = next
				continue
			}
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		follows++
		if follows > maxLinkFollows {
			return "", fmt.Errorf("%s: too many levels of symbolic links", rel)
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			resolved = ""
		}
		queue = append(splitPath(target), queue...)
	}
	return filepath.Join(root, resolved), nil
}

func splitPath(p string) []string {
	return strings.Split(strings.Trim(p, "/"), "/")
}

// mkdirResolved resolves rel inside root and creates what is missing of it
// with mode 0755, each component with Mkdir (never through a link).
func (x *extractor) mkdirResolved(rel string) (string, error) {
	return MkdirInRoot(x.root, rel, 0o755)
}

// MkdirInRoot resolves the relative path rel inside root the way a chroot
// at root would (symlinks resolved by this code, absolute targets from
// root, ".." clamped at root), creates the missing directories with mode
// perm, and returns the resulting host path, which is always inside root.
// Use it to write into a tree someone else populated, such as a machine
// rootfs, without following its links out of it.
func MkdirInRoot(root, rel string, perm fs.FileMode) (string, error) {
	root = filepath.Clean(root)
	p, err := resolveInRoot(root, rel)
	if err != nil {
		return "", err
	}
	relRes, err := filepath.Rel(root, p)
	if err != nil || relRes == ".." || strings.HasPrefix(relRes, "../") {
		return "", fmt.Errorf("%s resolves outside %s", rel, root)
	}
	cur := root
	if relRes == "." {
		return root, nil
	}
	for _, c := range strings.Split(relRes, string(filepath.Separator)) {
		cur = filepath.Join(cur, c)
		fi, err := os.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(cur, perm); err != nil && !errors.Is(err, fs.ErrExist) {
				return "", err
			}
			if err := os.Chmod(cur, perm); err != nil {
				return "", err
			}
		case err != nil:
			return "", err
		case fi.Mode()&fs.ModeSymlink != 0:
			// resolveInRoot followed every link; one here means the tree
			// changed under us.
			return "", fmt.Errorf("%s: is a symlink", cur)
		case !fi.IsDir():
			return "", fmt.Errorf("%s: not a directory", cur)
		}
	}
	return p, nil
}

// mkdev encodes a device number as glibc's makedev does.
func mkdev(major, minor int64) int {
	return int(((major & 0xfffff000) << 32) | ((major & 0xfff) << 8) |
		((minor & 0xffffff00) << 12) | (minor & 0xff))
}

// ExtractFile copies one regular file, member, out of the gzip-compressed
// tarball tarGz to dest (atomically: a temp file next to dest renamed over
// it), with the member's permission bits. Member names match with or
// without a leading "./".
func ExtractFile(tarGz, member, dest string) error {
	want, err := cleanName(member)
	if err != nil || want == "" {
		return fmt.Errorf("extract %s from %s: invalid member name", member, tarGz)
	}
	f, err := os.Open(tarGz)
	if err != nil {
		return fmt.Errorf("extract %s: %w", member, err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("extract %s from %s: %w", member, tarGz, err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("extract %s from %s: no such member", member, tarGz)
		}
		if err != nil {
			return fmt.Errorf("extract %s from %s: %w", member, tarGz, err)
		}
		name, err := cleanName(hdr.Name)
		if err != nil || name != want {
			continue
		}
		if hdr.Typeflag != tar.TypeReg {
			return fmt.Errorf("extract %s from %s: not a regular file", member, tarGz)
		}
		if err := WriteFileFrom(dest, tr, fs.FileMode(hdr.Mode)&fs.ModePerm); err != nil {
			return fmt.Errorf("extract %s from %s: %w", member, tarGz, err)
		}
		return nil
	}
}

// WriteFileFrom streams r into path atomically: a temp file in the same
// directory is written, synced, given mode perm and renamed over path, so
// a crash or a failed read leaves the old content. Parent directories are
// created with mode 0755.
func WriteFileFrom(path string, r io.Reader, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	if err := MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, r); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	ok = true
	return nil
}
