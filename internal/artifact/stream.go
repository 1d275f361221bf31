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
	"os"
	"path/filepath"
	"sync"
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
	if err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// hashFile streams p through SHA-256.
func hashFile(ctx context.Context, p string) (string, int64, error) {
	f, err := os.Open(p)
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
	tmp, sum, err := writeTemp(ctx, dst, r, mode)
	if err != nil {
		return "", false, err
	}
	defer os.Remove(tmp) // a no-op once renamed
	if want != "" && sum != want {
		return sum, false, &MismatchError{Got: sum, Want: want}
	}
	if skipSame {
		if same, err := sameFile(ctx, dst, mode, sum); err != nil {
			return sum, false, err
		} else if same {
			return sum, false, nil
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		return sum, false, err
	}
	return sum, true, nil
}

// writeTemp streams r into a new temp file next to dst, with mode, synced
// and closed, and returns its path and the content's hex SHA-256. The
// caller renames it over dst or removes it; on error nothing is left.
func writeTemp(ctx context.Context, dst string, r io.Reader, mode fs.FileMode) (tmpPath, sum string, err error) {
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return "", "", err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
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
	return tmp.Name(), sum, nil
}

// sameFile reports whether p is a regular file with mode and content
// hashing to wantHex.
func sameFile(ctx context.Context, p string, mode fs.FileMode, wantHex string) (bool, error) {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != mode.Perm() {
		return false, nil
	}
	sum, _, err := hashFile(ctx, p)
	if err != nil {
		return false, err
	}
	return sum == wantHex, nil
}
