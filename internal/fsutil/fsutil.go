// Package fsutil owns how aks-flex-node writes to the host: atomic file
// writes that leave either the old or the new content and have exactly the
// mode asked for, directory creation with exact modes, content comparison
// so converged re-runs touch nothing, writes confined to a machine rootfs
// (inroot.go), opening only regular files for content (open.go), and safe
// tar extraction (tar*.go).
package fsutil

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/renameio/v2"
)

// WriteFile atomically replaces path with data and mode perm exactly
// (whatever the umask and whatever mode an existing file had), unless it
// already holds exactly that content and mode. It reports whether it
// wrote. Parent directories are created with mode 0755. A link at path is
// replaced, not followed; for a path inside a machine rootfs use
// WriteFileIn.
func WriteFile(path string, data []byte, perm fs.FileMode) (changed bool, err error) {
	dir := filepath.Dir(path)
	if err := MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	defer r.Close()
	return writeFileAt(r, filepath.Base(path), data, perm)
}

// replaceAt streams src into a renameio pending file in r (a temp file
// beside name, mode perm exactly), syncs it and renames it over name.
func replaceAt(r *os.Root, name string, src io.Reader, perm fs.FileMode) error {
	f, err := renameio.NewPendingFile(name, renameio.WithRoot(r), renameio.WithStaticPermissions(perm))
	if err != nil {
		return err
	}
	defer f.Cleanup() // a no-op once replaced
	if _, err := io.Copy(f, src); err != nil {
		return err
	}
	return f.CloseAtomicallyReplace()
}

// MkdirAll creates dir and missing parents with exactly mode perm whatever
// the process umask (an installer run with umask 077 must not produce
// directories systemd services cannot traverse). Existing directories are
// left as they are.
func MkdirAll(dir string, perm fs.FileMode) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("mkdir %s: exists and is not a directory", dir)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chmod(dir, perm)
}

// RemoveIfExists removes path when it exists. On a read-only filesystem
// removing a missing path fails with EROFS rather than ENOENT, so check
// first: a missing file is already the desired state.
func RemoveIfExists(path string) (removed bool, err error) {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if err := os.Remove(path); err != nil {
		return false, err
	}
	return true, nil
}

// FileSHA256 returns the lowercase hex SHA-256 of the file at path and its
// size, reading it as a stream.
func FileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// RemovePending removes what a killed WriteFile of path left beside it:
// renameio's pending files, "."+base+digits, regular files only. A write
// cut short by kill -9 or a power cut leaves one, and no later write of
// the same file reuses its name. The caller must be the only writer of
// path (hold the node lock): another writer's pending file would go too.
// A missing directory has none.
func RemovePending(path string) error {
	dir, base := filepath.Dir(path), filepath.Base(path)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove pending writes of %s: %w", path, err)
	}
	prefix := "." + base
	for _, e := range entries {
		n := e.Name()
		digits, ok := strings.CutPrefix(n, prefix)
		if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" || !e.Type().IsRegular() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove pending write %s: %w", filepath.Join(dir, n), err)
		}
	}
	return nil
}
