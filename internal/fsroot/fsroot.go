// Package fsroot owns how aks-flex-node finds a path inside a directory
// tree that stands for some host's "/": the host itself, an image tree
// under --root, a machine rootfs, an extraction target. Every package that
// reads or writes under such a root resolves paths here, with one
// semantics: a chroot's.
//
// Symlinks are resolved by this package, one component at a time, never by
// the kernel: an absolute target starts again at the root and ".." stops at
// the root, so "etc -> /host/dir" in a machine rootfs means
// <rootfs>/host/dir, not the running host's /host/dir. A path resolved
// here is always the root or below it.
//
// Resolution is done by github.com/cyphar/filepath-securejoin (what runc
// and the kubelet use for the same job). What it returns is a path string:
// it stays inside the root as long as nobody swaps a component for a
// symlink after it was resolved. MkdirAll creates through an os.Root, which
// refuses to leave the root even then. A caller writing into a tree that
// another party changes while it works (a running machine) opens the
// resolved directory with os.OpenRoot and acts through that handle.
package fsroot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// clean makes root absolute and clean ("" is "/"): securejoin refuses a
// root with ".." in it, and a relative --root is legitimate.
func clean(root string) (string, error) {
	if root == "" {
		return "/", nil
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("root %s: %w", root, err)
	}
	return abs, nil
}

// Resolve returns the path this process opens for p, a path as the tree at
// root sees it (absolute, or relative to that tree's "/"), with every
// symlink on the way resolved inside root, the last component's included.
// Components that do not exist are taken as they are, so the result of a
// missing path is where it would be created. The result is root or below
// it. An error means a component could not be examined (EACCES) or there
// were too many links (ELOOP).
func Resolve(root, p string) (string, error) {
	r, err := clean(root)
	if err != nil {
		return "", err
	}
	host, err := securejoin.SecureJoin(r, p)
	if err != nil {
		return "", fmt.Errorf("resolve %s in %s: %w", p, r, err)
	}
	return host, nil
}

// ResolveNoFollow is Resolve for everything but p's last component, which
// is kept as it is: the path for acting on an entry itself (Lstat, remove,
// replace, create with O_NOFOLLOW) rather than on what a link there names.
// A last component of "." or ".." has no entry of its own and is resolved.
func ResolveNoFollow(root, p string) (string, error) {
	dir, base := path.Split(strings.TrimRight(p, "/"))
	if base == "" || base == "." || base == ".." {
		return Resolve(root, p)
	}
	d, err := Resolve(root, dir)
	if err != nil {
		return "", err
	}
	return filepath.Join(d, base), nil
}

// Within returns where host, a path Resolve returned for root, is as the
// tree at root sees it: "/" for root itself. Messages name that path.
func Within(root, host string) string {
	r, err := clean(root)
	if err != nil {
		return host
	}
	rel, err := filepath.Rel(r, host)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return host
	}
	return path.Clean("/" + filepath.ToSlash(rel))
}

// MkdirAll resolves p as Resolve does, creates the directories of the
// result that are missing with mode perm exactly (whatever the umask: a
// machine's services must be able to traverse them), and returns it. It
// creates through an os.Root at root, so nothing it creates or chmods is
// outside root even if the tree changes while it works; a symlink or a
// file where a directory should be is an error.
func MkdirAll(root, p string, perm fs.FileMode) (string, error) {
	r, err := clean(root)
	if err != nil {
		return "", err
	}
	host, err := Resolve(r, p)
	if err != nil {
		return "", err
	}
	if fi, err := os.Lstat(host); err == nil && fi.IsDir() {
		return host, nil // the common case: nothing to create
	}
	rel, err := filepath.Rel(r, host)
	if err != nil || rel == "." {
		return host, err
	}
	dir, err := os.OpenRoot(r)
	if err != nil {
		return "", err
	}
	defer dir.Close()
	cur := ""
	for _, c := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, c)
		if err := mkdirOne(dir, cur, perm); err != nil {
			return "", onHost(r, err)
		}
	}
	return host, nil
}

// mkdirOne makes sure name (relative to dir, its parents already checked)
// is a directory, creating it with perm when it is missing.
func mkdirOne(dir *os.Root, name string, perm fs.FileMode) error {
	fi, err := dir.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := dir.Mkdir(name, perm); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		return dir.Chmod(name, perm)
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0:
		// Resolve followed every link; one here means the tree changed
		// under us.
		return &fs.PathError{Op: "mkdir", Path: name, Err: errors.New("is a symlink")}
	case !fi.IsDir():
		return &fs.PathError{Op: "mkdir", Path: name, Err: errors.New("not a directory")}
	}
	return nil
}

// onHost makes an os.Root error name the host path, not the name relative
// to the root.
func onHost(root string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && !filepath.IsAbs(pe.Path) {
		pe.Path = filepath.Join(root, pe.Path)
	}
	return err
}

// OpenDir resolves dir inside root as Resolve does and opens the result as
// an *os.Root. The handle is opened through an os.Root at root, so even a
// component swapped for a link after it was resolved cannot take it out of
// root; every operation through the handle stays below it too. This is
// how a tree somebody else changes while we work (a running machine's
// rootfs) is written to. The caller closes it.
func OpenDir(root, dir string) (*os.Root, error) {
	r, err := clean(root)
	if err != nil {
		return nil, err
	}
	host, err := Resolve(r, dir)
	if err != nil {
		return nil, err
	}
	top, err := os.OpenRoot(r)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(r, host)
	if err != nil || rel == "." {
		return top, err
	}
	defer top.Close()
	d, err := top.OpenRoot(rel)
	if err != nil {
		return nil, onHost(r, err)
	}
	return d, nil
}

// MkdirOpen is MkdirAll followed by OpenDir: dir, created with mode perm
// where missing, opened as an *os.Root confined to root.
func MkdirOpen(root, dir string, perm fs.FileMode) (*os.Root, error) {
	if _, err := MkdirAll(root, dir, perm); err != nil {
		return nil, err
	}
	return OpenDir(root, dir)
}
