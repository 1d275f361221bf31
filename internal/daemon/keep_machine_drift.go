package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/machineapi"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/state"
)

// Repair kinds, the label of repairs_total and what `status` lists.
const (
	RepairNodeFileEdited  = "node-file-edited"
	RepairNodeFileDeleted = "node-file-deleted"
	RepairUnitStopped     = "unit-stopped"
	RepairInactiveSide    = "inactive-machine-stopped"
)

// keepNode is one pass of drift repair inside the running machine name,
// under the node lock the keeper holds: the node files start recorded
// (state.Applied.NodeFiles) put back from the agent's own rendering of
// the config when edited or deleted, and the units that read them
// restarted; containerd and the kubelet started when they are not
// active; the other side of the blue/green pair stopped. Files the state
// does not record are not the agent's and are never looked at. A machine
// that is still booting (or shutting down) is left for the next pass.
func (k *MachineKeeper) keepNode(ctx context.Context, name string, a *state.Applied) error {
	var errs []error
	errs = append(errs, k.stopOtherSide(ctx, name))
	out, _ := k.Control.Exec(ctx, name, "systemctl", "is-system-running")
	if st := strings.TrimSpace(string(out)); st != "running" && st != "degraded" {
		k.Log.Debug("machine not up yet; drift repair waits for the next pass", "machine", name, "state", st)
		return errors.Join(errs...)
	}
	restart, reload, restored, err := k.restoreFiles(ctx, name, a)
	errs = append(errs, err)
	errs = append(errs, k.restartRestored(ctx, name, restart, reload, restored))
	// A queued job is a unit on its way, and it can leave a unit inactive
	// only for now: an admin's `systemctl stop containerd` stops the
	// kubelet first (it Requires containerd). Starting the kubelet then
	// would start containerd again and cancel that stop half-way ("Job for
	// containerd.service canceled"); the next pass, with the machine at
	// rest, starts what is still stopped.
	if jobs, _ := k.Control.Exec(ctx, name, "systemctl", "list-jobs", "--no-legend"); len(bytes.TrimSpace(jobs)) > 0 {
		k.Log.Debug("systemd in the machine has jobs queued; units are checked at the next pass", "machine", name, "jobs", strings.TrimSpace(string(jobs)))
		return errors.Join(errs...)
	}
	for _, u := range node.KeptUnits(a.NodeFiles) {
		if slices.Contains(restart, u) {
			continue
		}
		errs = append(errs, k.keepUnit(ctx, name, u))
	}
	return errors.Join(errs...)
}

// restoredFile is a node file drift repair put back, reported once the
// unit that reads it was restarted.
type restoredFile struct{ kind, what, unit string }

// restartRestored reloads systemd when a unit file was restored, restarts
// the units that read the restored files, and only then reports each
// repair: the Event and `status` say "restored it and restarted X" when
// X runs the restored file, not before (a reader acting on the Event
// found systemd not yet reloaded).
func (k *MachineKeeper) restartRestored(ctx context.Context, name string, restart []string, reload bool, restored []restoredFile) error {
	var errs []error
	failed := map[string]error{}
	if reload {
		if _, err := k.Control.Exec(ctx, name, "systemctl", "daemon-reload"); err != nil {
			errs = append(errs, fmt.Errorf("daemon-reload: %w", err))
			for _, u := range restart {
				failed[u] = err
			}
		}
	}
	for _, u := range restart {
		if failed[u] != nil {
			continue
		}
		if _, err := k.Control.Exec(ctx, name, "systemctl", "restart", u); err != nil {
			failed[u] = err
			errs = append(errs, fmt.Errorf("restart %s: %w", u, err))
		}
	}
	for _, r := range restored {
		if err := failed[r.unit]; err != nil {
			k.Events.Warning(ctx, events.ReasonRepairFailed, "%s, but %s could not be restarted: %v", r.what, r.unit, err)
			continue
		}
		then := ""
		if r.unit != "" {
			then = " and restarted " + r.unit
		}
		k.repaired(ctx, r.kind, r.what+then)
	}
	return errors.Join(errs...)
}

// restoreFiles puts back each recorded node file that drifted and says
// which units read them (to restart), whether a unit file was among them
// (systemd reloads first), and what it restored.
func (k *MachineKeeper) restoreFiles(ctx context.Context, name string, a *state.Applied) (restart []string, reload bool, restored []restoredFile, err error) {
	if len(a.NodeFiles) == 0 {
		return nil, false, nil, nil // a join by an agent that recorded none
	}
	root := machine.Dir(k.Layout, name)
	drift, err := node.FindDrift(root, a.NodeFiles)
	if err != nil || len(drift) == 0 {
		return nil, false, nil, err
	}
	rendered, err := k.render()
	if err != nil {
		k.Events.Warning(ctx, events.ReasonRepairFailed, "%d node file(s) in machine %s changed (%s) and cannot be restored: %v", len(drift), name, drift[0].Path, err)
		return nil, false, nil, fmt.Errorf("restore node files: %w", err)
	}
	var errs []error
	for _, d := range drift {
		i := slices.IndexFunc(rendered, func(f node.File) bool { return f.Path == d.Path })
		if i < 0 {
			errs = append(errs, fmt.Errorf("restore %s: %w", d.Path, node.ErrRenderingChanged))
			continue
		}
		if err := node.Restore(root, rendered[i], a.NodeFiles[d.Path]); err != nil {
			k.Events.Warning(ctx, events.ReasonRepairFailed, "%s in machine %s was %s and could not be restored: %v", d.Path, name, d.How, err)
			errs = append(errs, err)
			continue
		}
		unit, unitFile := node.UnitOf(d.Path)
		reload = reload || unitFile
		if unit != "" && !slices.Contains(restart, unit) {
			restart = append(restart, unit)
		}
		kind := RepairNodeFileEdited
		if d.How == "deleted" {
			kind = RepairNodeFileDeleted
		}
		restored = append(restored, restoredFile{kind: kind, unit: unit,
			what: fmt.Sprintf("%s in machine %s was %s; aks-flex-node restored it", d.Path, name, d.How)})
	}
	return restart, reload, restored, errors.Join(errs...)
}

// render is the agent's rendering of the node files from the config file
// as it is now, with the AKS Machine's goal the agent applied over it:
// only files whose rendering still has the recorded checksum are
// restored from it.
func (k *MachineKeeper) render() ([]node.File, error) {
	c, opts, err := k.nodeConfig(nil)
	if err != nil {
		return nil, err
	}
	return node.Render(c, opts)
}

// nodeConfig is the config the node files render from and the host's
// options: the config file with goal over it, or (goal nil) with the
// settings the follow-machine loop recorded as applied, when there are.
func (k *MachineKeeper) nodeConfig(goal *machineapi.Settings) (*config.Config, node.Options, error) {
	c, err := config.Load(k.ConfigFile)
	if err != nil {
		return nil, node.Options{}, err
	}
	if goal == nil {
		rec, err := machineapi.LoadGoalRecord(k.Layout.OnRoot(k.Layout.MachineGoal()))
		switch {
		case err == nil:
			goal = &rec.Applied
		case !errors.Is(err, fs.ErrNotExist):
			return nil, node.Options{}, err
		}
	}
	if goal != nil {
		c = goal.Overlay(c)
	}
	cgroupMode := k.CgroupMode
	if cgroupMode == nil {
		cgroupMode = func() (string, error) { return machine.HostCgroupMode(k.Layout.Root()) }
	}
	mode, err := cgroupMode()
	if err != nil {
		return nil, node.Options{}, fmt.Errorf("detect cgroup mode: %w", err)
	}
	return c, node.HostOptions(mode), nil
}

// keepUnit starts unit in machine name when it is inactive or failed. A
// unit on its way (activating, reloading, deactivating) is left alone.
func (k *MachineKeeper) keepUnit(ctx context.Context, name, unit string) error {
	out, _ := k.Control.Exec(ctx, name, "systemctl", "is-active", unit)
	st := strings.TrimSpace(string(out))
	if st != "inactive" && st != "failed" {
		return nil
	}
	if _, err := k.Control.Exec(ctx, name, "systemctl", "restart", unit); err != nil {
		k.Events.Warning(ctx, events.ReasonRepairFailed, "%s in machine %s was %s and could not be started: %v", unit, name, st, err)
		return fmt.Errorf("start %s (was %s): %w", unit, st, err)
	}
	k.repaired(ctx, RepairUnitStopped, fmt.Sprintf("%s in machine %s was %s; aks-flex-node started it", unit, name, st))
	return nil
}

// stopOtherSide stops every machine of the pair but the active one: two
// kubelets as one node would fight over it.
func (k *MachineKeeper) stopOtherSide(ctx context.Context, active string) error {
	var errs []error
	for _, other := range k.Layout.Machines() {
		if other == active {
			continue
		}
		st, err := k.Control.State(ctx, other)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st != "active" && st != "activating" && st != "reloading" {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, stopTimeout)
		err = k.Control.Stop(sctx, other)
		cancel()
		if err != nil {
			k.Events.Warning(ctx, events.ReasonRepairFailed, "machine %s, the inactive side, was %s and could not be stopped: %v", other, st, err)
			errs = append(errs, fmt.Errorf("stop inactive machine %s: %w", other, err))
			continue
		}
		k.repaired(ctx, RepairInactiveSide, fmt.Sprintf("machine %s, the inactive side, was %s while %s is active; aks-flex-node stopped it", other, st, active))
	}
	return errors.Join(errs...)
}

// stopTimeout bounds stopping the inactive side under the node lock.
const stopTimeout = 2 * time.Minute

// repaired says what was repaired: one log line, the metric, an Event on
// the Node and the state's list of last repairs, which `status` shows.
func (k *MachineKeeper) repaired(ctx context.Context, kind, what string) {
	k.Log.Info("repaired: "+what, "kind", kind)
	k.Metrics.Repaired(kind)
	k.Events.Normal(ctx, events.ReasonRepaired, "%s", what)
	if err := state.Open(k.Layout).RecordRepair(state.Repair{At: time.Now().UTC(), Kind: kind, What: what}); err != nil {
		k.Log.Warn("could not record the repair for status", "error", err)
	}
}
