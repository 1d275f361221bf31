// Package nodelock owns the node lock (docs/design.md, decision 8): one flock(2)
// on a file in the layout's state dir, held by every command and agent
// loop that changes the node (start, reset, agent-upgrade, the agent's
// keep-machine loop; repave and drift repair when they come), so that no
// two of them interleave. Commands wait for it, bounded, and say who holds
// it; agent loops take it at once or skip their pass.
//
// Why flock: the kernel drops it when the holder's last descriptor closes,
// so a holder that was killed or lost power never blocks anyone. The file
// carries who holds it (pid, command, since when) for the waiting message;
// that record is advice, the flock is the lock.
//
// The file exists only while the lock is held (or after a holder died):
// the holder removes it as the last step of Release, and an acquirer checks
// after flock that the path still names the file it locked, so a removal
// can never let two holders in. That keeps a refused start and a reset
// from leaving the file (or a state dir made only for it) behind.
package nodelock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// FileName is the lock's file in the layout's state dir.
const FileName = "node.lock"

// DefaultWait is how long a command waits for another holder by default.
// A first start on a slow host (image pull, two join waits of up to five
// minutes each) can hold the lock that long; a caller that should not wait
// passes 0.
const DefaultWait = 15 * time.Minute

// Path is the lock's host path in l.
func Path(l layout.Layout) string { return l.StateDir() + "/" + FileName }

// Holder is who holds the lock, as the holder recorded it.
type Holder struct {
	PID     int       `json:"pid"`
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
}

// String names the holder: "start (pid 4242) since 2026-01-02T03:04:05Z".
func (h Holder) String() string {
	if h.PID == 0 {
		return "a process that has not recorded itself yet"
	}
	return fmt.Sprintf("%s (pid %d) since %s", orUnknown(h.Command), h.PID, h.Since.UTC().Format(time.RFC3339))
}

func orUnknown(s string) string {
	if s == "" {
		return "an unnamed command"
	}
	return s
}

// HeldError is the lock held by someone else: at once (Wait 0) or still
// after the wait.
type HeldError struct {
	Path   string // host path of the lock file
	Holder Holder
	Waited time.Duration
}

func (e *HeldError) Error() string {
	if e.Waited <= 0 {
		return fmt.Sprintf("the node lock %s is held by %s", e.Path, e.Holder)
	}
	return fmt.Sprintf("the node lock %s is still held by %s after waiting %v", e.Path, e.Holder, roundWait(e.Waited))
}

func roundWait(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(10 * time.Millisecond)
}

// Wait says how a command waits for the lock.
type Wait struct {
	// Timeout bounds the wait; 0 fails at once when the lock is held.
	Timeout time.Duration
	// Notify, if set, is told the holder when the wait starts and again
	// whenever another holder takes over.
	Notify func(Holder)
	// Poll is how often the lock is tried while waiting; 0 means 100ms.
	Poll time.Duration
}

// Lock is the held node lock.
type Lock struct {
	f    *os.File
	path string // as this process opens it
	dir  string
}

// errHeld is try's "somebody else has it".
var errHeld = errors.New("held")

// Acquire takes the lock for command, waiting as w says. It returns a
// *HeldError when the lock stays held, and ctx's error (naming the holder)
// when ctx ends first.
func Acquire(ctx context.Context, l layout.Layout, command string, w Wait) (*Lock, error) {
	poll := w.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	start := time.Now()
	var last Holder
	notified := false
	for {
		lk, holder, err := try(l, command)
		if err == nil {
			return lk, nil
		}
		if !errors.Is(err, errHeld) {
			return nil, err
		}
		if w.Timeout <= 0 {
			return nil, &HeldError{Path: Path(l), Holder: holder}
		}
		waited := time.Since(start)
		if waited >= w.Timeout {
			return nil, &HeldError{Path: Path(l), Holder: holder, Waited: waited}
		}
		if w.Notify != nil && (!notified || holder.PID != last.PID || holder.Command != last.Command) {
			w.Notify(holder)
			notified, last = true, holder
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the node lock %s, held by %s: %w", Path(l), holder, context.Cause(ctx))
		case <-time.After(min(poll, w.Timeout-waited)):
		}
	}
}

// TryAcquire takes the lock for command if nobody holds it, and returns
// a *HeldError naming the holder otherwise: what agent loops use, which
// skip a pass rather than queue behind a start or a reset.
func TryAcquire(l layout.Layout, command string) (*Lock, error) {
	return Acquire(context.Background(), l, command, Wait{})
}

// try makes one attempt. The state dir may be removed under it (by a
// holder's Release that left it empty), and the lock file may be removed
// or replaced between open and flock: both are retried.
func try(l layout.Layout, command string) (*Lock, Holder, error) {
	dir := l.OnRoot(l.StateDir())
	p := l.OnRoot(Path(l))
	for attempt := 0; ; attempt++ {
		if attempt == 20 {
			return nil, Holder{}, fmt.Errorf("lock %s: the file kept being replaced while it was locked", Path(l))
		}
		if err := fsutil.MkdirAll(dir, 0o755); errors.Is(err, fs.ErrNotExist) {
			continue // a releasing holder removed it as it was made
		} else if err != nil {
			return nil, Holder{}, fmt.Errorf("lock %s: %w", Path(l), err)
		}
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
		if errors.Is(err, fs.ErrNotExist) {
			continue // the dir went between MkdirAll and open
		}
		if err != nil {
			return nil, Holder{}, fmt.Errorf("lock %s: %w", Path(l), err)
		}
		fi, err := f.Stat()
		if err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("is a %v, not a regular file; remove it", fi.Mode().Type())
		}
		if err != nil {
			f.Close()
			return nil, Holder{}, fmt.Errorf("lock %s: %w", Path(l), err)
		}
		if err := flock(f); err != nil {
			h := readHolder(f)
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, h, errHeld
			}
			return nil, Holder{}, fmt.Errorf("lock %s: %w", Path(l), err)
		}
		// A holder removes the file as it releases: if this is that file,
		// the lock that counts is the one on whatever the path names now.
		cur, err := os.Lstat(p)
		if err != nil || !os.SameFile(fi, cur) {
			f.Close()
			continue
		}
		lk := &Lock{f: f, path: p, dir: dir}
		if err := lk.record(command); err != nil {
			lk.Release()
			return nil, Holder{}, fmt.Errorf("lock %s: record the holder: %w", Path(l), err)
		}
		return lk, Holder{}, nil
	}
}

func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

func (lk *Lock) record(command string) error {
	b, err := json.Marshal(Holder{PID: os.Getpid(), Command: command, Since: time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	if err := lk.f.Truncate(0); err != nil {
		return err
	}
	_, err = lk.f.WriteAt(append(b, '\n'), 0)
	return err
}

// readHolder reads what the holder recorded; a holder that has not written
// yet (or wrote something else) reads as the zero Holder.
func readHolder(f *os.File) Holder {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 4096))
	if err != nil {
		return Holder{}
	}
	var h Holder
	if json.Unmarshal([]byte(strings.TrimSpace(string(b))), &h) != nil {
		return Holder{}
	}
	return h
}

// Release removes the lock file and drops the lock; the state dir goes
// too when that left it empty (a refused start on a fresh host made it, or
// a reset emptied it). It is safe to call twice.
func (lk *Lock) Release() {
	if lk == nil || lk.f == nil {
		return
	}
	// Only this holder's file: while it held the lock nobody could have
	// replaced it, but a file it does not own is never removed.
	if fi, err := lk.f.Stat(); err == nil {
		if cur, err := os.Lstat(lk.path); err == nil && os.SameFile(fi, cur) {
			_ = os.Remove(lk.path)
		}
	}
	_ = lk.f.Close()
	lk.f = nil
	_ = os.Remove(lk.dir) // fails, as it should, unless empty
}
