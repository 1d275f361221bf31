package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// Every byte the agent installs or stages passes through the two functions
// in this file: hashFile to check what is on disk, writeStream to put new
// content on disk. Both stream with a fixed buffer, so memory stays flat
// however large a bundle file is.

const copyBufSize = 1 << 20

var bufPool = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// copyHashed copies r to w (w may be io.Discard) and returns the hex
// SHA-256 of what was copied and its length. It stops when ctx ends.
func copyHashed(ctx context.Context, w io.Writer, r io.Reader) (string, int64, error) {
	h := sha256.New()
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	var dst io.Writer = h
	if w != io.Discard {
		dst = io.MultiWriter(w, h)
	}
	// ctxReader hides WriterTo/ReaderFrom, so the pooled buffer is used.
	n, err := io.CopyBuffer(dst, ctxReader{ctx, r}, *bp)
	hashedBytes.Add(n)
	if err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// hashFile streams p through SHA-256. Only a regular file is read (a
// named pipe is refused, not waited on).
func hashFile(ctx context.Context, p string) (string, int64, error) {
	f, err := fsutil.OpenRegular(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	return copyHashed(ctx, io.Discard, f)
}

// ctxReader stops a long copy when the context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// hashReader hashes what is read through it, for consumers that parse a
// stream (gunzip, untar) and must know it was the verified one.
type hashReader struct {
	r io.Reader
	h hash.Hash
}

func newHashReader(r io.Reader) *hashReader { return &hashReader{r, sha256.New()} }

func (h *hashReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	hashedBytes.Add(int64(n))
	return n, err
}

// Sum is the hex SHA-256 of everything read so far.
func (h *hashReader) Sum() string { return hex.EncodeToString(h.h.Sum(nil)) }

// MismatchError is content that does not hash to what vouches for it.
type MismatchError struct{ Got, Want string }

func (e *MismatchError) Error() string { return fmt.Sprintf("sha256 %s != %s", e.Got, e.Want) }

// writeStream makes dst hold what r yields, with mode: the content streams
// into a temp file next to dst while it is hashed, is synced, and is
// renamed over dst (a symlink at dst is replaced, not followed). When want
// is set, content hashing to anything else is refused with a
// *MismatchError and dst is left as it was. With skipSame, a dst that
// already is a regular file with mode and the same content is left alone
// and changed is false.
func writeStream(ctx context.Context, dst string, r io.Reader, mode fs.FileMode, want string, skipSame bool) (sum string, changed bool, err error) {
	d, err := os.OpenRoot(filepath.Dir(dst))
	if err != nil {
		return "", false, err
	}
	defer d.Close()
	return writeStreamIn(ctx, d, filepath.Base(dst), r, mode, want, skipSame)
}

// writeStreamIn is writeStream for name in the directory d: the temp file
// and the rename stay in d, whatever links the tree around it holds.
func writeStreamIn(ctx context.Context, d *os.Root, name string, r io.Reader, mode fs.FileMode, want string, skipSame bool) (sum string, changed bool, err error) {
	tmp, sum, err := writeTemp(ctx, d, name, r, mode)
	if err != nil {
		return "", false, err
	}
	defer d.Remove(tmp) // a no-op once renamed
	if want != "" && sum != want {
		return sum, false, &MismatchError{Got: sum, Want: want}
	}
	if skipSame {
		if same, err := sameFileIn(ctx, d, name, mode, sum); err != nil {
			return sum, false, err
		} else if same {
			return sum, false, nil
		}
	}
	if err := d.Rename(tmp, name); err != nil {
		return sum, false, err
	}
	return sum, true, nil
}

// writeTemp streams r into a new temp file beside name in d, with mode,
// synced and closed, and returns its name in d and the content's hex
// SHA-256. The caller renames it over name or removes it; on error
// nothing is left.
func writeTemp(ctx context.Context, d *os.Root, name string, r io.Reader, mode fs.FileMode) (tmpName, sum string, err error) {
	var tmp *os.File
	for range 100 {
		tmpName = "." + name + ".tmp-" + strconv.FormatUint(rand.Uint64(), 36)
		tmp, err = d.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return "", "", err
	}
	// The return statements below clear tmpName before this runs: remove
	// the file by the name it was created under.
	created := tmpName
	defer func() {
		if err != nil {
			tmp.Close()
			d.Remove(created)
		}
	}()
	if sum, _, err = copyHashed(ctx, tmp, r); err != nil {
		return "", "", err
	}
	if err = tmp.Chmod(mode); err != nil {
		return "", "", err
	}
	if err = tmp.Sync(); err != nil {
		return "", "", err
	}
	if err = tmp.Close(); err != nil {
		return "", "", err
	}
	return tmpName, sum, nil
}

// sameFile reports whether p is a regular file with mode and content
// hashing to wantHex.
func sameFile(ctx context.Context, p string, mode fs.FileMode, wantHex string) (bool, error) {
	d, err := os.OpenRoot(filepath.Dir(p))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer d.Close()
	return sameFileIn(ctx, d, filepath.Base(p), mode, wantHex)
}

// sameFileIn is sameFile for name in d. What is hashed is what was
// opened, and only if it is a regular file: a machine that swaps a binary
// for a named pipe cannot hang the agent.
func sameFileIn(ctx context.Context, d *os.Root, name string, mode fs.FileMode, wantHex string) (bool, error) {
	fi, err := d.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() || fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != mode.Perm() {
		return false, nil
	}
	f, err := d.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return false, err // replaced since the Lstat: write it again
	}
	sum, _, err := copyHashed(ctx, io.Discard, f)
	if err != nil {
		return false, err
	}
	return sum == wantHex, nil
}
