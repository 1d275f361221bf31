package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/metrics"
	"github.com/Azure/aks-flex-node/internal/state"
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
	// Metrics counts the repairs and Events records them on the Node;
	// either may be nil.
	Metrics *metrics.Registry
	Events  *events.Recorder
	// ConfigFile (as this process opens it) is what drift repair renders
	// the node files from; "" repairs no files (units and the inactive
	// side are still kept).
	ConfigFile string
	// CgroupMode says the host's cgroup mode, which the rendering
	// depends on; nil reads the host's mount table.
	CgroupMode func() (string, error)
}

// RepairMachineStarted is the repair kind of a machine the keeper started.
const RepairMachineStarted = "machine-started"

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
	applied, err := state.Open(k.Layout).Applied()
	if err != nil {
		return fmt.Errorf("keep machine: %w", err)
	}
	name := k.Machine
	if name == "" {
		name = applied.ActiveMachine()
	}
	st, err := k.Control.State(ctx, name)
	if err != nil {
		return fmt.Errorf("keep machine %s: %w", name, err)
	}
	switch st {
	case "active", "reloading":
		if applied == nil {
			return nil
		}
		if err := k.keepNode(ctx, name, applied); err != nil {
			return fmt.Errorf("keep node in machine %s: %w", name, err)
		}
		return nil
	case "activating":
		return nil
	case "deactivating":
		// Someone is stopping it on purpose (reset, repave); a start now
		// would fight them. The next interval looks again.
		return nil
	}
	// The other side first: after an interrupted repave it may be the
	// one running, and two machines must never run as the node.
	if name == applied.ActiveMachine() {
		if err := k.stopOtherSide(ctx, name); err != nil {
			return fmt.Errorf("keep machine %s: %w", name, err)
		}
	}
	k.Log.Warn("machine is not running on a joined host; starting it", "machine", name, "state", st, "joined-marker", k.Layout.JoinedMarker())
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := k.Control.Start(sctx, name); err != nil {
		k.Events.Warning(ctx, events.ReasonRepairFailed, "machine %s was %s on a joined host and could not be started: %v", name, st, err)
		return fmt.Errorf("keep machine %s (was %s): %w", name, st, err)
	}
	k.repaired(ctx, RepairMachineStarted, fmt.Sprintf("machine %s was %s on a joined host; aks-flex-node started it", name, st))
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
