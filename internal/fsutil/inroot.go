package fsutil

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/Azure/aks-flex-node/internal/fsroot"
)

// Writes into a tree that stands for another system's "/" (a machine
// rootfs). p is a path as that tree sees it; links in the tree are
// resolved with chroot semantics (internal/fsroot), and the directory the
// entry lives in is opened as an *os.Root, so what the tree holds, and
// what a process running in it changes while we work, can redirect a
// write only to another place inside the tree, never onto the host.

// splitIn cleans p and splits it into its directory and base name; a p
// with no base (the root itself) is an error.
func splitIn(p string) (dir, base string, err error) {
	c := path.Clean("/" + p)
	dir, base = path.Split(c)
	if base == "" || base == "." || base == ".." {
		return "", "", fmt.Errorf("%q names no file", p)
	}
	return dir, base, nil
}

// WriteFileIn is WriteFile confined to root: it atomically replaces p in
// the tree at root with data and mode perm exactly, unless it already
// holds exactly that, and reports whether it wrote. Missing directories
// are created with mode 0755. A link at p is replaced, not followed.
func WriteFileIn(root, p string, data []byte, perm fs.FileMode) (changed bool, err error) {
	dir, base, err := splitIn(p)
	if err != nil {
		return false, err
	}
	r, err := fsroot.MkdirOpen(root, dir, 0o755)
	if err != nil {
		return false, fmt.Errorf("write %s: %w", p, err)
	}
	defer r.Close()
	return writeFileAt(r, base, data, perm)
}

// SymlinkIn makes p in the tree at root a symlink to target (kept
// verbatim: it is resolved inside the tree) unless it already is one. The
// new link is made under a temporary name and renamed over the old, so p
// is never missing. An existing non-link at p is an error: it is someone
// else's file, not a link to replace.
func SymlinkIn(root, p, target string) (changed bool, err error) {
	dir, base, err := splitIn(p)
	if err != nil {
		return false, err
	}
	r, err := fsroot.MkdirOpen(root, dir, 0o755)
	if err != nil {
		return false, fmt.Errorf("link %s: %w", p, err)
	}
	defer r.Close()
	fi, err := r.Lstat(base)
	switch {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		if cur, err := r.Readlink(base); err != nil {
			return false, err
		} else if cur == target {
			return false, nil
		}
	case err == nil:
		return false, fmt.Errorf("%s exists and is not a symlink", filepath.Join(r.Name(), base))
	case !errors.Is(err, fs.ErrNotExist):
		return false, err
	}
	tmp, err := tempName(base)
	if err != nil {
		return false, err
	}
	if err := r.Symlink(target, tmp); err != nil {
		return false, err
	}
	if err := r.Rename(tmp, base); err != nil {
		_ = r.Remove(tmp)
		return false, err
	}
	return true, nil
}

// RemoveIn removes p (the entry itself, a link is not followed) from the
// tree at root when it exists. A missing p or parent is the desired state,
// and is checked first: on a read-only filesystem removing a missing path
// fails with EROFS.
func RemoveIn(root, p string) (removed bool, err error) {
	dir, base, err := splitIn(p)
	if err != nil {
		return false, err
	}
	r, err := fsroot.OpenDir(root, dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("remove %s: %w", p, err)
	}
	defer r.Close()
	if _, err := r.Lstat(base); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if err := r.Remove(base); err != nil {
		return false, err
	}
	return true, nil
}

// OpenIn opens the regular file p of the tree at root for reading: links
// resolved inside the tree, anything but a regular file refused without
// blocking (see OpenRegular).
func OpenIn(root, p string) (*os.File, error) {
	dir, base, err := splitIn(p)
	if err != nil {
		return nil, err
	}
	host, err := fsroot.Resolve(root, path.Join(dir, base))
	if err != nil {
		return nil, err
	}
	r, err := fsroot.OpenDir(root, "/")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	rel, err := filepath.Rel(r.Name(), host)
	if err != nil || rel == "." || strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("open %s in %s: resolves to the root", p, root)
	}
	return openRegularIn(r, rel, host)
}

// ReadFileIn reads the regular file p of the tree at root (see OpenIn),
// at most max bytes.
func ReadFileIn(root, p string, max int64) ([]byte, error) {
	f, err := OpenIn(root, p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readMax(f, f.Name(), max)
}

// writeFileAt replaces name in r with data and mode perm exactly, unless
// it already holds exactly that. renameio writes a temp file in r, syncs
// it and renames it over name: a crash leaves the old file or the new.
// Only WithStaticPermissions: renameio.WriteFile would add
// WithExistingPermissions, which keeps an old file's mode, so a 0644
// file meant to hold a token would stay 0644.
func writeFileAt(r *os.Root, name string, data []byte, perm fs.FileMode) (bool, error) {
	if same, err := sameContentAt(r, name, data, perm); err != nil {
		return false, err
	} else if same {
		return false, nil
	}
	shown := filepath.Join(r.Name(), name)
	if err := replaceAt(r, name, bytes.NewReader(data), perm); err != nil {
		return false, fmt.Errorf("write %s: %w", shown, err)
	}
	return true, nil
}

func sameContentAt(r *os.Root, name string, data []byte, perm fs.FileMode) (bool, error) {
	fi, err := r.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// Special bits count as a difference: the file is written without
	// them.
	const bits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky
	if !fi.Mode().IsRegular() || fi.Mode()&bits != perm.Perm() || fi.Size() != int64(len(data)) {
		return false, nil
	}
	f, err := openRegularIn(r, name, filepath.Join(r.Name(), name))
	if errors.Is(err, ErrNotRegular) {
		return false, nil // swapped since the Lstat: rewrite it
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	old, err := readMax(f, f.Name(), int64(len(data)))
	if err != nil {
		return false, nil // grew since the Lstat
	}
	return bytes.Equal(old, data), nil
}

// tempName is a fresh name beside base for an entry that is renamed over
// it.
func tempName(base string) (string, error) {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", err
	}
	return "." + base + ".tmp-" + hex.EncodeToString(rnd[:]), nil
}
