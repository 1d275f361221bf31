package agentupgrade

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// linksLockWait bounds how long a change of the links waits for another
// holder of the links lock; every holder keeps it only for a few renames.
const linksLockWait = 30 * time.Second

// lockLinks takes LinksLockFile (see there), polling so a caller is never
// stuck in an uninterruptible wait.
func lockLinks(l layout.Layout, maxWait time.Duration) (func(), error) {
	return lockLinksAt(statePath(l, LinksLockFile), maxWait)
}

// lockLinksAt is lockLinks on the lock file p, as this process opens it.
func lockLinksAt(p string, maxWait time.Duration) (func(), error) {
	if err := fsutil.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, maxWait, true, func(context.Context) (bool, error) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		}
		return false, fmt.Errorf("lock %s: %w", p, err)
	})
	if err != nil {
		f.Close()
		if wait.Interrupted(err) {
			return nil, fmt.Errorf("lock %s: still held after %v (by the recovery script or an upgrade); see journalctl -u %s", p, maxWait, layout.RecoveryUnit)
		}
		return nil, err
	}
	return func() { f.Close() }, nil
}

// switchCurrent points current at the new slot, under the links lock and
// only while the record written for this upgrade is still there: recovery
// may have resolved it (the old agent crashed after the record was
// written, and recovery wrote "aborted"), and switching then would leave
// an unconfirmed slot current with nothing in flight.
func switchCurrent(l layout.Layout, rec InFlight) error {
	unlock, err := lockLinks(l, linksLockWait)
	if err != nil {
		return err
	}
	defer unlock()
	r, err := LoadInFlight(l)
	if err != nil {
		return err
	}
	if r == nil || r.ToSlot != rec.ToSlot || r.ToVersion != rec.ToVersion || r.SwitchMono != rec.SwitchMono {
		why := "it is gone"
		if res, _ := LoadResult(l); res != nil && r == nil {
			why = fmt.Sprintf("recovery resolved it: %s: %s", res.Result, res.Reason)
		} else if r != nil {
			why = "another upgrade's record replaced it"
		}
		return fmt.Errorf("the upgrade record for %s changed before current was switched (%s); nothing was switched, see aks-flex-node status", rec.ToVersion, why)
	}
	_, err = pointLink(l, l.UpgradeSlots().Current, rec.ToSlot)
	return err
}

// staleAge is how old a link's temp file must be before cleanStale takes
// it for a leftover: the recovery script and seeding create one between a
// `ln` and a `mv`, and removing it there would make their rename fail.
const staleAge = time.Minute

// cleanStale removes temp files a killed upgrade left in the lib dir. No
// link ever names them. Candidates are only staged under the node lock,
// which the caller holds; link temp files are made by others too, so only
// old ones go.
func cleanStale(l layout.Layout) {
	matches, _ := filepath.Glob(l.OnRoot(l.LibDir() + "/.candidate-*"))
	for _, m := range matches {
		os.Remove(m)
	}
	// Every other dotfile there is a writer's temp file: SymlinkAtomic's
	// ".<name>.tmp-*", renameio's ".<name><digits>" (slots, the recovery
	// script).
	tmps, _ := filepath.Glob(l.OnRoot(l.LibDir() + "/.*"))
	for _, m := range tmps {
		if fi, err := os.Lstat(m); err == nil && time.Since(fi.ModTime()) > staleAge {
			os.Remove(m)
		}
	}
}
