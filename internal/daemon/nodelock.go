package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/nodelock"
)

// lockOrSkip is how a loop that changes the node takes the node lock for
// the part of its pass that changes it: at once or not at all. A loop
// never queues behind a start, a reset or an agent-upgrade (what it would
// do may be moot by then; its next pass looks again), so when the lock is
// held it logs who holds it and returns ok false. A loop takes the lock
// only around the change itself, never across a long wait. Another loop
// of this same agent is not a command: it holds the lock for one short
// change (keep-machine at boot while it starts the machine, keep-host-routes
// for a few ip calls), so a loop waits for it, up to ownLoopPatience,
// rather than lose a whole interval to it (the machine started a minute
// late after a reboot, when the two loops' first passes met).
func lockOrSkip(l layout.Layout, log *slog.Logger, loop string) (release func(), ok bool, err error) {
	deadline := time.Now().Add(ownLoopPatience)
	for {
		lock, err := nodelock.TryAcquire(l, "agent "+loop)
		var held *nodelock.HeldError
		switch {
		case errors.As(err, &held):
			// PID 0: a holder that has not written its record yet.
			h := held.Holder
			mine := (h.PID == os.Getpid() && strings.HasPrefix(h.Command, "agent ")) || h.PID == 0
			if mine && time.Now().Before(deadline) {
				time.Sleep(ownLoopRetry)
				continue
			}
			log.Info(loop+": skipped this pass; another command is changing the node", "holder", held.Holder.String(), "lock", held.Path)
			return nil, false, nil
		case err != nil:
			return nil, false, fmt.Errorf("%s: %w", loop, err)
		}
		return lock.Release, true, nil
	}
}

// ownLoopPatience bounds a loop's wait for another loop of this agent
// (keep-machine holds the lock across `machinectl start`, bounded by
// startTimeout); ownLoopRetry is how often it looks.
const (
	ownLoopPatience = startTimeout + 5*time.Second
	ownLoopRetry    = 200 * time.Millisecond
)
