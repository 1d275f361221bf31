package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/systemd"
	"github.com/Azure/aks-flex-node/internal/task"
	"github.com/Azure/aks-flex-node/internal/upgrade"
)

// keepInStateDir survives reset: it belongs to install.sh, and
// uninstall.sh needs it to remove the binary reset keeps.
var keepInStateDir = map[string]bool{"install-record": true}

// Reset undoes start: it stops and removes the agent service and the
// machines, then removes every path start tracked (deepest first). It is
// safe to run twice and after a half-finished start. The agent binary stays;
// uninstall.sh removes it.
func (p *Pipeline) Reset(ctx context.Context) (bool, error) {
	p.init()
	mgr := systemd.NewManager(p.Layout.Root())
	tasks := []task.Task{
		task.Func{N: "remove-agent-service", F: func(ctx context.Context) (task.Result, error) {
			changed, err := upgrade.UninstallService(ctx, p.Layout, mgr, p.Log)
			return task.Result{Changed: changed}, err
		}},
	}
	for _, name := range []string{"kube1", "kube2"} {
		tasks = append(tasks, task.Func{N: "remove-machine-" + name, F: func(ctx context.Context) (task.Result, error) {
			changed := false
			if mgr.Live() {
				if st, err := p.control.State(ctx, name); err == nil && st != "inactive" && st != "failed" && st != "" {
					if err := p.control.Stop(ctx, name); err != nil {
						return task.Result{}, err
					}
					changed = true
				}
				_ = mgr.ResetFailed(ctx, machine.ServiceName(name))
			}
			removed, err := machine.Remove(p.Layout, name)
			return task.Result{Changed: changed || removed}, err
		}})
	}
	tasks = append(tasks, task.Func{N: "remove-tracked-paths", F: p.removeTracked})
	changed, err := p.runner.Serial(ctx, tasks...)
	if err == nil && changed && mgr.Live() {
		err = mgr.DaemonReload(ctx)
	}
	return changed, err
}

func (p *Pipeline) removeTracked(ctx context.Context) (task.Result, error) {
	dir := p.Layout.OnRoot(p.Layout.StateDir())
	tr, err := state.OpenTracker(dir)
	if err != nil {
		return task.Result{}, err
	}
	paths := tr.List()
	// Files start writes without tracking them one by one live in these
	// dirs: the applied state and the staged bundles.
	paths = append(paths,
		p.Layout.StateDir()+"/"+state.AppliedFile, p.Layout.StateDir()+"/"+state.AppliedFile+".sha256",
		p.Layout.StateDir()+"/"+JoinedMarker, p.Layout.StateDir()+"/"+state.TrackerFile)
	changed := false
	var errs []error
	// Owned wholesale: everything inside is ours.
	owned := map[string]bool{p.Layout.LogDir(): true, p.Layout.BundlesDir(): true, p.Layout.MachineStateDir(): true}
	for _, hp := range dedupeDeepestFirst(paths) {
		full := p.Layout.OnRoot(hp)
		fi, err := os.Lstat(full)
		if errors.Is(err, fs.ErrNotExist) {
			continue // also avoids EROFS when the path is on a read-only /usr
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch {
		case !fi.IsDir():
			err = os.Remove(full)
		case owned[hp], strings.HasPrefix(hp, p.Layout.BundlesDir()+"/"):
			err = os.RemoveAll(full)
		case hp == p.Layout.StateDir():
			err = removeDirExcept(full, keepInStateDir)
		case hp == p.Layout.LibDir():
			// The upgrade slots, their links and the recovery script are
			// the agent binary, which reset keeps.
			err = removeDirExcept(full, upgrade.Kept(p.Layout))
		default:
			err = os.Remove(full) // only when empty: anything else is not ours
			if err != nil && isNotEmpty(err) {
				p.Log.Info("keeping non-empty directory", "path", hp)
				err = nil
				continue
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", hp, err))
			continue
		}
		changed = true
	}
	return task.Result{Changed: changed}, errors.Join(errs...)
}

func isNotEmpty(err error) bool {
	return errors.Is(err, fs.ErrExist) || strings.Contains(err.Error(), "directory not empty")
}

// removeDirExcept removes dir's entries except keep, and dir itself if
// that leaves it empty.
func removeDirExcept(dir string, keep map[string]bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	kept := 0
	for _, e := range entries {
		if keep[e.Name()] {
			kept++
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if kept == 0 {
		return os.Remove(dir)
	}
	return nil
}

func dedupeDeepestFirst(paths []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range paths {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	// Deepest first so a directory is considered after what was in it.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && strings.Count(out[j], "/") > strings.Count(out[j-1], "/"); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
