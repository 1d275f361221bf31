package fsutil

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// WriteStreamAtomic writes r to path through a temp file in the same
// directory, fsyncs it, sets mode perm and renames it over path, then fsyncs
// the directory: a crash or kill -9 at any point leaves the old path (or no
// path) and at worst a stray temp file, never a half-written path. It
// returns the SHA-256 of what it wrote.
func WriteStreamAtomic(path string, r io.Reader, perm fs.FileMode) (sum string, err error) {
	dir := filepath.Dir(path)
	if err := MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	h := sha256.New()
	if _, err = io.Copy(io.MultiWriter(f, h), r); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Chmod(perm); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return "", fmt.Errorf("write %s: fsync: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), SyncDir(dir)
}

// SymlinkAtomic makes link a symlink to target by renaming a new symlink over
// whatever link is (a file or another symlink; rename replaces the name, it
// never writes through an old link), then fsyncs the directory. A reader
// sees the old link or the new one, never none.
func SymlinkAtomic(target, link string) (changed bool, err error) {
	if cur, err := os.Readlink(link); err == nil && cur == target {
		return false, nil
	}
	dir := filepath.Dir(link)
	tmp := filepath.Join(dir, "."+filepath.Base(link)+".tmp-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.Symlink(target, tmp); err != nil {
		return false, fmt.Errorf("link %s -> %s: %w", link, target, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("link %s -> %s: %w", link, target, err)
	}
	return true, SyncDir(dir)
}

// SyncDir fsyncs a directory so renames and removals in it survive a power
// cut.
func SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
