package daemon

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/nodelock"
)

// lockOrSkip is how a loop that changes the node takes the node lock for
// the part of its pass that changes it: at once or not at all. A loop
// never queues behind a start, a reset or an agent-upgrade (what it would
// do may be moot by then; its next pass looks again), so when the lock is
// held it logs who holds it and returns ok false. A loop takes the lock
// only around the change itself, never across a long wait.
func lockOrSkip(l layout.Layout, log *slog.Logger, loop string) (release func(), ok bool, err error) {
	lock, err := nodelock.TryAcquire(l, "agent "+loop)
	var held *nodelock.HeldError
	switch {
	case errors.As(err, &held):
		log.Info(loop+": skipped this pass; another command is changing the node", "holder", held.Holder.String(), "lock", held.Path)
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("%s: %w", loop, err)
	}
	return lock.Release, true, nil
}
