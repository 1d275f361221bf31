// Package fsutil owns how aks-flex-node writes to the host: atomic file
// writes that leave either the old or the new content, directory creation
// with exact modes, and content comparison so converged re-runs touch nothing.
package fsutil

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
)

// WriteFile atomically replaces path with data and mode perm, unless it
// already holds exactly that content and mode. It reports whether it wrote.
// Parent directories are created with mode 0755.
func WriteFile(path string, data []byte, perm fs.FileMode) (changed bool, err error) {
	if same, err := sameContent(path, data, perm); err != nil {
		return false, err
	} else if same {
		return false, nil
	}
	if err := MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	// renameio writes a temp file in the same directory, fsyncs it and
	// renames it over the target: a crash leaves the old file or the new.
	// WithStaticPermissions makes the mode exact regardless of the umask.
	if err := renameio.WriteFile(path, data, perm, renameio.WithStaticPermissions(perm)); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	return true, nil
}

func sameContent(path string, data []byte, perm fs.FileMode) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != perm.Perm() || fi.Size() != int64(len(data)) {
		return false, nil
	}
	old, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	return bytes.Equal(old, data), nil
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
