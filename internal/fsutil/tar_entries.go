package fsutil

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/Azure/aks-flex-node/internal/fsroot"
)

// One function per kind of archive member: each creates the member at
// target (a host path whose parent entry resolved inside the root), never
// through whatever was there before.

// dir makes target a directory, owner-writable until finish applies the
// archive's mode, so a 0555 directory can still receive its children.
func (x *extractor) dir(rel, target string, hdr *tar.Header) error {
	fi, err := os.Lstat(target)
	if err == nil && !fi.IsDir() {
		if err := os.RemoveAll(target); err != nil {
			return err
		}
	}
	if err != nil || !fi.IsDir() {
		if err := os.Mkdir(target, 0o700); err != nil {
			return err
		}
	}
	resolved, err := filepath.Rel(x.root, target)
	if err != nil {
		return err
	}
	x.queueDir(resolved, hdr)
	x.markWritten(rel)
	return nil
}

// queueDir records hdr as the metadata of the directory at resolved (see
// dirMeta); a later entry for the same directory wins.
func (x *extractor) queueDir(resolved string, hdr *tar.Header) {
	if resolved == "." {
		resolved = ""
	}
	if i, ok := x.dirIndex[resolved]; ok {
		x.dirs[i].hdr = hdr
		return
	}
	x.dirIndex[resolved] = len(x.dirs)
	x.dirs = append(x.dirs, dirMeta{resolved, hdr})
}

// regular writes a new file at target with r's content.
func regular(target string, r io.Reader) error {
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
	return f.Close()
}

// symlink creates the link target -> linkname, unless linkname climbs out
// of the root from parent, the directory (resolved inside the root) the
// link is created in.
func (x *extractor) symlink(parent, target, linkname string) error {
	depth, err := x.depth(parent)
	if err != nil {
		return err
	}
	if err := checkSymlink(depth, linkname); err != nil {
		return err
	}
	if err := replace(target); err != nil {
		return err
	}
	return os.Symlink(linkname, target)
}

// hardlink links target to an earlier member. A hardlink shares the
// inode, so the metadata is already the source's.
func (x *extractor) hardlink(rel, target, linkname string) error {
	src, err := x.hardlinkSource(linkname)
	if err != nil {
		return err
	}
	if src != target {
		if err := replace(target); err != nil {
			return err
		}
		// link(2) without AT_SYMLINK_FOLLOW links a symlink itself, not
		// what it points to.
		if err := os.Link(src, target); err != nil {
			return err
		}
	}
	x.markWritten(rel)
	return nil
}

// device creates a character or block device or a fifo.
func device(target string, hdr *tar.Header) error {
	if err := replace(target); err != nil {
		return err
	}
	mode := uint32(hdr.Mode & 0o7777)
	switch hdr.Typeflag {
	case tar.TypeChar:
		return syscall.Mknod(target, mode|syscall.S_IFCHR, mkdev(hdr.Devmajor, hdr.Devminor))
	case tar.TypeBlock:
		return syscall.Mknod(target, mode|syscall.S_IFBLK, mkdev(hdr.Devmajor, hdr.Devminor))
	}
	return syscall.Mkfifo(target, mode)
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

// depth is how many directories dir, a path fsroot resolved inside the
// root, is below it.
func (x *extractor) depth(dir string) (int, error) {
	rel, err := filepath.Rel(x.root, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return 0, fmt.Errorf("%s is not inside %s", dir, x.root)
	}
	if rel == "." {
		return 0, nil
	}
	return strings.Count(rel, "/") + 1, nil
}

// checkSymlink rejects a link whose target, read relative to the link's
// directory, depth directories below the root, climbs out of the root.
// The depth is where the directory really is, not what the archive name
// says: after "a/b -> ..", "a/b/c/esc" is one directory deep, not three.
// Absolute targets start at the root and so cannot climb out. This is a
// check of the target's text: a target through another link (x/..) can
// still land elsewhere, which is why nothing on the host follows links in
// a machine rootfs except through internal/fsroot.
func checkSymlink(depth int, target string) error {
	if target == "" {
		return errors.New("symlink with empty target")
	}
	if strings.HasPrefix(target, "/") {
		return nil
	}
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
	dirRel, base := splitRel(rel)
	dir, err := fsroot.Resolve(x.root, dirRel)
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

// mkdev encodes a device number as glibc's makedev does.
func mkdev(major, minor int64) int {
	return int(((major & 0xfffff000) << 32) | ((major & 0xfff) << 8) |
		((minor & 0xffffff00) << 12) | (minor & 0xff))
}
