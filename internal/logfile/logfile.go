// Package logfile owns the agent's log file in agent.logDir: size-based
// rotation (agent.log, agent.log.1, ... agent.log.<keep>), and the slog
// handler that writes each record there, with its time, as well as to the
// journal. The journal keeps the agent's lines too; the file is for hosts
// whose journal is volatile or small, and for support bundles.
package logfile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults: 10 MiB per file, five rotated files kept: at most 60 MiB.
const (
	DefaultMaxBytes = 10 << 20
	DefaultKeep     = 5
)

// reopenEvery is how often a Writer whose directory is missing tries
// again.
const reopenEvery = 30 * time.Second

// Writer appends to a file and rotates it when the next write would pass
// MaxBytes. It never creates its directory: the log dir is start's to
// create and reset's to remove, and an agent running on a host not yet
// joined has no business making it. While the directory is missing,
// writes are dropped and the file is tried again every 30 s.
type Writer struct {
	path     string
	maxBytes int64
	keep     int

	mu        sync.Mutex
	f         *os.File
	size      int64
	lastTried time.Time
}

// New is a Writer for path, rotated at maxBytes, keeping keep old files.
func New(path string, maxBytes int64, keep int) *Writer {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if keep < 1 {
		keep = DefaultKeep
	}
	return &Writer{path: path, maxBytes: maxBytes, keep: keep}
}

// Write appends p, rotating first when p would take the file past its
// size. p is written whole (one log line) even when it alone is larger.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		if time.Since(w.lastTried) < reopenEvery {
			return len(p), nil
		}
		w.lastTried = time.Now()
		if err := w.open(); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return len(p), nil
			}
			return 0, err
		}
	}
	if w.size > 0 && w.size+int64(len(p)) > w.maxBytes {
		if err := w.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := w.f.Write(p)
	w.size += int64(n)
	return n, err
}

// open opens the file for appending, 0600 (logs can name what a secret
// was for), refusing a link in its place.
func (w *Writer) open() error {
	if _, err := os.Stat(filepath.Dir(w.path)); err != nil {
		return err
	}
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return fmt.Errorf("%s is not a regular file", w.path)
	}
	// O_CREATE's mode applies only to a new file: one an older agent or
	// an admin left 0644 is made 0600 here, and so are its rotated files.
	if err := tighten(f, fi); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", w.path, err)
	}
	for i := 1; i <= w.keep; i++ {
		tightenPath(fmt.Sprintf("%s.%d", w.path, i))
	}
	w.f, w.size = f, fi.Size()
	return nil
}

// tighten makes an open regular file 0600 when it is anything else.
func tighten(f *os.File, fi os.FileInfo) error {
	if fi.Mode().Perm() == 0o600 {
		return nil
	}
	return f.Chmod(0o600)
}

// tightenPath makes a rotated file 0600, opening it without following a
// link and without blocking on a pipe; anything but a regular file is
// left alone (rotation replaces it).
func tightenPath(p string) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		_ = tighten(f, fi)
	}
}

// rotate shifts path.N to path.N+1 (dropping the oldest), path to path.1,
// and opens a new path.
func (w *Writer) rotate() error {
	w.f.Close()
	w.f = nil
	_ = os.Remove(fmt.Sprintf("%s.%d", w.path, w.keep))
	for i := w.keep - 1; i >= 1; i-- {
		_ = os.Rename(fmt.Sprintf("%s.%d", w.path, i), fmt.Sprintf("%s.%d", w.path, i+1))
	}
	if err := os.Rename(w.path, w.path+".1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return w.open()
}

// Close closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}

// Tee is a handler that hands each record to primary (the journal's) and
// writes it to w as key=value text with its time, at level and above.
func Tee(primary slog.Handler, w *Writer, level slog.Leveler) slog.Handler {
	return tee{primary, slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})}
}

type tee struct{ a, b slog.Handler }

func (t tee) Enabled(ctx context.Context, l slog.Level) bool {
	return t.a.Enabled(ctx, l) || t.b.Enabled(ctx, l)
}

func (t tee) Handle(ctx context.Context, r slog.Record) error {
	var errs []error
	if t.a.Enabled(ctx, r.Level) {
		errs = append(errs, t.a.Handle(ctx, r.Clone()))
	}
	if t.b.Enabled(ctx, r.Level) {
		errs = append(errs, t.b.Handle(ctx, r))
	}
	return errors.Join(errs...)
}

func (t tee) WithAttrs(as []slog.Attr) slog.Handler {
	return tee{t.a.WithAttrs(as), t.b.WithAttrs(as)}
}

func (t tee) WithGroup(name string) slog.Handler {
	return tee{t.a.WithGroup(name), t.b.WithGroup(name)}
}
