package fsutil

import (
	"context"
	"errors"
	"os/exec"
	"syscall"
	"time"
)

// RunFresh runs the command newCmd builds and, while that fails with
// ETXTBSY ("text file busy"), builds and runs it again after a short pause.
//
// Exec of a file this process has just written can fail that way even
// though the file was closed: a child that another goroutine forked while
// the file was open for writing holds a copy of the write descriptor until
// it execs its own program (close-on-exec only takes effect then). The
// preflight checks run concurrently and fork, so the layout check's probe
// executable hit this. The window is that fork-to-exec gap, so a few short
// retries close it; a file that stays busy (really being written) still
// fails, after about 0.6 s.
func RunFresh(ctx context.Context, newCmd func() *exec.Cmd) error {
	delay := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := newCmd().Run()
		if err == nil || !errors.Is(err, syscall.ETXTBSY) || attempt == 6 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay *= 2
	}
}
