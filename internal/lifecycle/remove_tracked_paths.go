package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/task"
)

// keepInStateDir survives reset: the install record belongs to install.sh,
// and uninstall.sh needs it to remove the binary reset keeps; the node lock
// is held by this reset, and removing it under the holder would let a
// second holder in (its Release removes it, and the state dir if that
// leaves it empty).
var keepInStateDir = map[string]bool{layout.InstallRecordName: true, nodelock.FileName: true}

type removeTrackedPaths struct {
	layout layout.Layout
	log    *slog.Logger
	// keepCaches keeps the staged bundles and the verification records
	// (reset --keep-image-cache).
	keepCaches bool
}

// RemoveTrackedPaths returns the task that removes every path start
// tracked, deepest first: files, directories that are ours wholesale,
// directories that are empty once ours are gone (the identity dir, with
// its token cache, is ours wholesale). It keeps the agent
// binary's slots, links and recovery script, and the install record.
// With keepCaches it also keeps the staged bundles (a registry's bundle
// pulled, upstream's files downloaded) and the bundles' verification
// records: the next start checks a staged bundle by the registry's digest
// and every bundle by its record, as a converged start does, instead of
// pulling and hashing again.
func RemoveTrackedPaths(l layout.Layout, log *slog.Logger, keepCaches bool) task.Task {
	return &removeTrackedPaths{layout: l, log: log, keepCaches: keepCaches}
}

func (t *removeTrackedPaths) Name() string { return "remove-tracked-paths" }

func (t *removeTrackedPaths) Do(ctx context.Context) (task.Result, error) {
	l := t.layout
	tr, err := state.Open(l).Tracker()
	if err != nil {
		return task.Result{}, err
	}
	paths := tr.List()
	// Files start writes without tracking them one by one live in these
	// dirs: the applied state and the staged bundles. The state dir is
	// the agent's wholesale (but for keepInStateDir), tracked or not: the
	// node lock may have made it before the tracker looked, and a start
	// killed between a write and its tracking leaves files only there.
	paths = append(paths,
		l.StateDir()+"/"+state.AppliedFile, l.StateDir()+"/"+state.AppliedFile+".sha256",
		l.JoinedMarker(), l.StateDir()+"/"+state.TrackerFile, l.StateDir())
	changed := false
	var errs []error
	for _, hp := range dedupeDeepestFirst(paths) {
		if t.kept(hp) {
			continue
		}
		removed, err := t.remove(hp)
		if err != nil {
			errs = append(errs, err)
		}
		changed = changed || removed
	}
	return task.Result{Changed: changed}, errors.Join(errs...)
}

// kept: hp is a staged bundle or a verification record, and keepCaches
// keeps them.
func (t *removeTrackedPaths) kept(hp string) bool {
	if !t.keepCaches {
		return false
	}
	for _, dir := range []string{t.layout.BundlesDir(), t.layout.StateDir() + "/" + artifact.RecordDir} {
		if hp == dir || strings.HasPrefix(hp, dir+"/") {
			return true
		}
	}
	return false
}

// inStateDir is what stays in the state dir: keepInStateDir, and with
// keepCaches the staged bundles and the verification records.
func (t *removeTrackedPaths) inStateDir() map[string]bool {
	if !t.keepCaches {
		return keepInStateDir
	}
	keep := maps.Clone(keepInStateDir)
	keep[path.Base(t.layout.BundlesDir())] = true
	keep[artifact.RecordDir] = true
	return keep
}

// remove removes one tracked host path the way its kind asks.
func (t *removeTrackedPaths) remove(hp string) (bool, error) {
	l := t.layout
	full := l.OnRoot(hp)
	fi, err := os.Lstat(full)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // also avoids EROFS when the path is on a read-only /usr
	}
	if err != nil {
		return false, err
	}
	// Owned wholesale: everything inside is ours.
	owned := hp == l.LogDir() || hp == l.BundlesDir() || hp == l.MachineStateDir() || hp == l.IdentityDir() || strings.HasPrefix(hp, l.BundlesDir()+"/")
	removed := true
	switch {
	case !fi.IsDir():
		err = os.Remove(full)
	case owned:
		err = os.RemoveAll(full)
	case hp == l.StateDir():
		removed, err = removeDirExcept(full, t.inStateDir())
	case hp == l.LibDir():
		// The upgrade slots, their links and the recovery script are
		// the agent binary, which reset keeps.
		removed, err = removeDirExcept(full, agentupgrade.Kept(l))
	default:
		err = os.Remove(full) // only when empty: anything else is not ours
		if err != nil && isNotEmpty(err) {
			t.log.Info("keeping non-empty directory", "path", hp)
			return false, nil
		}
	}
	if err != nil {
		return false, fmt.Errorf("remove %s: %w", hp, err)
	}
	return removed, nil
}

func isNotEmpty(err error) bool {
	return errors.Is(err, fs.ErrExist) || strings.Contains(err.Error(), "directory not empty")
}

// removeDirExcept removes dir's entries except keep, and dir itself if
// that leaves it empty; removed says whether anything went.
func removeDirExcept(dir string, keep map[string]bool) (removed bool, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	kept := 0
	for _, e := range entries {
		if keep[e.Name()] {
			kept++
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return removed, err
		}
		removed = true
	}
	if kept == 0 {
		return true, os.Remove(dir)
	}
	return removed, nil
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
