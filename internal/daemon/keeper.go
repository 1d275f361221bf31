package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
)

// MachineKeeper is the agent's upkeep of a joined host's machine. Nothing
// else starts the machine after the host reboots (or after someone stops
// it): start boots it once, and the machine unit is not enabled, so that
// start, reset and a later repave stay the only things that decide which
// side runs. The agent, which systemd does start at boot, brings it back.
type MachineKeeper struct {
	Layout  layout.Layout
	Machine string // "" means the layout's active machine
	Control *machine.Control
	Log     *slog.Logger
}

// keepMachineLoop names the loop in logs and as the node lock's holder.
const keepMachineLoop = "keep-machine"

// startTimeout bounds `machinectl start` while the keeper holds the node
// lock. It returns once systemd-nspawn runs the machine's init, not when
// the machine has booted, so this is a guard against a stuck unit, not a
// wait for the boot.
const startTimeout = time.Minute

// KeepMachine is the keeper's loop: local, since starting a machine needs
// nothing remote.
func KeepMachine(k *MachineKeeper) Loop { return Loop{Name: keepMachineLoop, Local: true, Run: k.Keep} }

// Keep starts the machine when the host has joined (start's marker is
// there) and the machine's unit is neither active nor on its way. A host
// that never joined, or was reset, is left alone. The decision and the
// start happen under the node lock, taken at once or not at all: while a
// start, a reset or an agent-upgrade holds it, the pass is skipped (a
// start brings the machine up itself; a reset is taking it down).
func (k *MachineKeeper) Keep(ctx context.Context) error {
	if joined, err := k.joined(); err != nil || !joined {
		return err
	}
	release, ok, err := lockOrSkip(k.Layout, k.Log, keepMachineLoop)
	if err != nil || !ok {
		return err
	}
	defer release()
	// A reset may have finished between the first look and the lock.
	if joined, err := k.joined(); err != nil || !joined {
		return err
	}
	name := k.Machine
	if name == "" {
		name = layout.MachineBlue
	}
	state, err := k.Control.State(ctx, name)
	if err != nil {
		return fmt.Errorf("keep machine %s: %w", name, err)
	}
	switch state {
	case "active", "activating", "reloading":
		return nil
	case "deactivating":
		// Someone is stopping it on purpose (reset, repave); a start now
		// would fight them. The next interval looks again.
		return nil
	}
	k.Log.Warn("machine is not running on a joined host; starting it", "machine", name, "state", state, "joined-marker", k.Layout.JoinedMarker())
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := k.Control.Start(sctx, name); err != nil {
		return fmt.Errorf("keep machine %s (was %s): %w", name, state, err)
	}
	k.Log.Info("machine started", "machine", name)
	return nil
}

// joined says whether start's joined marker is there.
func (k *MachineKeeper) joined() (bool, error) {
	_, err := os.Stat(k.Layout.OnRoot(k.Layout.JoinedMarker()))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("keep machine: %w", err)
	}
	return true, nil
}
