package fsutil

import (
	"context"
	"errors"
	"os/exec"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// textBusyBackoff spaces the retries of RunFresh: six runs, 10 ms to
// 160 ms apart, about 0.3 s of waiting in all.
var textBusyBackoff = wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Steps: 6}

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
// fails with the last run's error, as does a run cut short by ctx.
func RunFresh(ctx context.Context, newCmd func() *exec.Cmd) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, textBusyBackoff, func(context.Context) (bool, error) {
		last = newCmd().Run()
		if last != nil && !errors.Is(last, syscall.ETXTBSY) {
			return false, last
		}
		return last == nil, nil
	})
	if last != nil {
		return last
	}
	return err
}
