package fsutil

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is what opening anything but a regular file for its
// content returns (wrapped in an *fs.PathError naming the path).
var ErrNotRegular = errors.New("not a regular file")

// OpenRegular opens the regular file at p (links followed) for reading
// and refuses anything else without blocking: it opens with O_NONBLOCK,
// so a named pipe with no writer cannot hang the caller, and checks what
// it opened (fstat, not a stat of the path before opening), so nothing
// swapped in between is read. Files that arrive over the network or from
// a machine rootfs (bundle manifests, checksum sidecars, image archives)
// are opened here.
func OpenRegular(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	return checkRegular(f, p)
}

// openRegularIn is OpenRegular for name inside r (see os.Root for how
// links are followed there).
func openRegularIn(r *os.Root, name, shown string) (*os.File, error) {
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	return checkRegular(f, shown)
}

// checkRegular returns f when it is a regular file and closes it
// otherwise. O_NONBLOCK has no effect on reads of a regular file, so f is
// returned as it is.
func checkRegular(f *os.File, shown string) (*os.File, error) {
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: shown, Err: fmt.Errorf("%w (%s)", ErrNotRegular, kind(fi.Mode()))}
	}
	return f, nil
}

// kind names a file type for messages.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	}
	return "of mode " + m.String()
}

// ReadRegular reads the regular file at p (see OpenRegular), at most max
// bytes; a longer file is an error naming the limit.
func ReadRegular(p string, max int64) ([]byte, error) {
	f, err := OpenRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readMax(f, p, max)
}

func readMax(r io.Reader, shown string, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", shown, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("read %s: larger than %d bytes", shown, max)
	}
	return b, nil
}
