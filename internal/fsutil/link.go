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

	"github.com/google/renameio/v2"
)

// WriteStreamAtomic writes r to path through a renameio pending file in
// the same directory (fsynced, mode perm exactly whatever the umask,
// renamed over path), then fsyncs the directory: a crash or kill -9 at any
// point leaves the old path (or no path) and at worst a stray temp file
// (".<name><digits>"), never a half-written path. It returns the SHA-256
// of what it wrote.
func WriteStreamAtomic(path string, r io.Reader, perm fs.FileMode) (string, error) {
	dir := filepath.Dir(path)
	if err := MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// WithTempDir keeps the temp file next to path: renameio would
	// otherwise use $TMPDIR whenever a rename from there works.
	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(dir), renameio.WithStaticPermissions(perm))
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	defer f.Cleanup() // a no-op once replaced
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), r); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
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
