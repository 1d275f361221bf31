// Package upgrade owns the agent's blue/green self-upgrade: the two slots
// and the `current` and `last-good` links in the layout's lib dir, seeding
// them on first install, the atomic switch, the in-flight record, the new
// agent's confirmation, and the recovery script, unit and timer that roll
// back without a human when the new agent crashes, exits or does not
// confirm in time.
package upgrade

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/mod/semver"

	"github.com/Azure/aks-flex-node/internal/failpoint"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/systemd"
)

// DefaultDeadline is how long a new agent has to confirm itself healthy.
// Confirmation needs no cluster (config, layout, self-check), so a healthy
// agent confirms within a second or two; the margin covers a loaded host.
const DefaultDeadline = 2 * time.Minute

// Options are agent-upgrade's inputs.
type Options struct {
	Binary, URL    string
	SHA256         string
	Preflight      bool
	AllowDowngrade bool
	Deadline       time.Duration
	Manager        *systemd.Manager
	Log            *slog.Logger
}

// Plan is what an upgrade does (or, with --preflight, would do).
type Plan struct {
	Source      string `json:"source"`
	SHA256      string `json:"sha256"`
	FromSlot    string `json:"fromSlot"`
	FromVersion string `json:"fromVersion"`
	ToSlot      string `json:"toSlot"`
	ToVersion   string `json:"toVersion"`
	Downgrade   bool   `json:"downgrade"`
	Unchanged   bool   `json:"unchanged"`
}

// RefusedError is an upgrade refused for what was asked (a downgrade, a
// checksum that does not match): invalid input, not a host failure.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return e.Reason }

// Outcome is what happened after the switch.
type Outcome struct {
	Plan   Plan    `json:"plan"`
	Result *Result `json:"result,omitempty"`
}

// Run performs agent-upgrade. With Preflight it stops after verifying and
// test-running the candidate and deciding the plan, and changes nothing.
func Run(ctx context.Context, l layout.Layout, o Options) (*Outcome, error) {
	if o.Deadline <= 0 {
		o.Deadline = DefaultDeadline
	}
	if err := checkSHA(o.SHA256); err != nil {
		return nil, err
	}
	if !o.Preflight && !o.Manager.Live() {
		return nil, errors.New("agent-upgrade restarts the agent service and needs the running systemd of this host (not --root)")
	}
	if !o.Preflight {
		for _, u := range append([]string{l.Units().Agent}, UnitPaths(l)...) {
			if _, err := os.Stat(l.OnRoot(u)); err != nil {
				return nil, fmt.Errorf("the agent service is not installed (%w); run aks-flex-node install-service --config %s first", err, l.ConfigFile())
			}
		}
	}
	unlock, err := lock(l)
	if err != nil {
		return nil, err
	}
	defer unlock()
	cleanStale(l)

	if err := checkNotInFlight(ctx, l, o); err != nil {
		return nil, err
	}
	cur, err := linkSlot(l, l.UpgradeSlots().Current)
	if err != nil {
		return nil, err
	}
	good, err := linkSlot(l, l.UpgradeSlots().LastGood)
	if err != nil {
		return nil, err
	}
	if cur == "" || good == "" {
		return nil, fmt.Errorf("the upgrade slots in %s are not seeded (prefix %q): run aks-flex-node install-service --config %s first", l.LibDir(), l.Prefix(), l.ConfigFile())
	}
	if cur != good {
		return nil, fmt.Errorf("current (%s) and last-good (%s) differ with no upgrade in flight; the recovery unit repairs this: systemctl start %s", cur, good, layout.RecoveryUnit)
	}
	curInfo, err := TestRun(ctx, slotPath(l, cur))
	if err != nil {
		return nil, fmt.Errorf("current slot: %w", err)
	}
	plan := Plan{FromSlot: cur, FromVersion: curInfo.Version, ToSlot: other(l, cur)}

	// 1. Stage the candidate next to the slots (so the final rename is
	// atomic), verifying the checksum while it streams.
	src, desc, err := openCandidate(ctx, o.Binary, o.URL)
	if err != nil {
		return nil, err
	}
	plan.Source = desc
	staged, sum, err := stage(l, src)
	src.Close()
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", desc, err)
	}
	defer os.Remove(staged) // gone after the rename; cleans up on refusal
	plan.SHA256 = sum
	if sum != strings.ToLower(o.SHA256) {
		return nil, &RefusedError{Reason: fmt.Sprintf("checksum mismatch for %s: expected %s, got %s; nothing was changed", desc, strings.ToLower(o.SHA256), sum)}
	}
	failpoint.Hit(StepVerified)
	info, err := TestRun(ctx, staged)
	if err != nil {
		return nil, &RefusedError{Reason: fmt.Sprintf("candidate %s does not run: %v; nothing was changed", desc, err)}
	}
	plan.ToVersion = info.Version
	failpoint.Hit(StepTested)

	// 2. Refuse a downgrade.
	curSum, err := fileSHA256(slotPath(l, cur))
	if err != nil {
		return nil, err
	}
	cmp, comparable := compareVersions(info.Version, curInfo.Version)
	switch {
	case curSum == sum:
		plan.Unchanged = true
		return &Outcome{Plan: plan}, nil
	case !comparable || cmp <= 0:
		plan.Downgrade = true
		if !o.AllowDowngrade {
			why := "is not newer than"
			if !comparable {
				why = "cannot be ordered (not semver) against"
			}
			return &Outcome{Plan: plan}, &RefusedError{Reason: fmt.Sprintf("candidate %s %s the current %s; pass --allow-downgrade to install it anyway", info.Version, why, curInfo.Version)}
		}
	}
	if o.Preflight {
		return &Outcome{Plan: plan}, nil
	}

	// The inactive slot is named by no link: overwriting it is safe.
	if err := os.Rename(staged, slotPath(l, plan.ToSlot)); err != nil {
		return nil, fmt.Errorf("write slot %s: %w", plan.ToSlot, err)
	}
	if err := fsutil.SyncDir(l.OnRoot(l.LibDir())); err != nil {
		return nil, err
	}
	failpoint.Hit(StepSlotWritten)

	// 3. Arm the deadline timer, then record the upgrade, both before
	// anything names the new slot, so every later crash is seen by
	// recovery. The timer first: its first check runs two seconds after
	// it starts, long after the record is written, and a record never
	// exists without a timer to resolve it (a check that finds no record
	// stops the timer again).
	_ = o.Manager.ResetFailed(ctx, layout.RecoveryTimer)
	if err := armTimer(ctx, o.Manager); err != nil {
		return nil, fmt.Errorf("arm the upgrade deadline: %w", err)
	}
	failpoint.Hit(StepTimerArmed)
	if _, err := fsutil.RemoveIfExists(statePath(l, FailedFile)); err != nil {
		return nil, err
	}
	rec := InFlight{FromSlot: plan.FromSlot, FromVersion: plan.FromVersion, ToSlot: plan.ToSlot, ToVersion: plan.ToVersion,
		Started: time.Now(), Deadline: time.Now().Add(o.Deadline)}
	rec.SwitchMono, rec.BootID = switchClock()
	if err := saveInFlight(l, rec); err != nil {
		return nil, err
	}
	// Again, now that the record exists: a recovery check that found no
	// record between the first start and the write may have stopped the
	// timer. Starting an active timer changes nothing.
	if err := armTimer(ctx, o.Manager); err != nil {
		return nil, fmt.Errorf("arm the upgrade deadline: %w", err)
	}
	failpoint.Hit(StepRecorded)

	// 4. Switch and restart.
	if err := switchCurrent(l, rec); err != nil {
		return nil, err
	}
	failpoint.Hit(StepSwitched)
	o.Log.Info("switched", "current", plan.ToSlot, "from", plan.FromVersion, "to", plan.ToVersion, "deadline", rec.Deadline.UTC().Format(time.RFC3339))
	// The unit's start limit is there to stop crash loops; a deliberate
	// upgrade must not be refused because earlier upgrades (or their
	// rollbacks) restarted the agent, so reset the counter first.
	_ = o.Manager.ResetFailed(ctx, layout.AgentUnitName)
	if err := o.Manager.Restart(ctx, layout.AgentUnitName); err != nil {
		return nil, fmt.Errorf("restart the agent on %s (recovery rolls back at the deadline): %w", plan.ToSlot, err)
	}
	failpoint.Hit(StepRestarted)

	// 5. The new agent confirms, or recovery rolls back. Wait for either.
	res, err := waitOutcome(ctx, l, rec)
	return &Outcome{Plan: plan, Result: res}, err
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

// linksLockWait bounds how long a change of the links waits for another
// holder of the links lock; every holder keeps it only for a few renames.
const linksLockWait = 30 * time.Second

// lockLinks takes LinksLockFile (see there), polling so a caller is never
// stuck in an uninterruptible wait.
func lockLinks(l layout.Layout, wait time.Duration) (func(), error) {
	return lockLinksAt(statePath(l, LinksLockFile), wait)
}

// lockLinksAt is lockLinks on the lock file p, as this process opens it.
func lockLinksAt(p string, wait time.Duration) (func(), error) {
	if err := fsutil.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	give := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", p, err)
		}
		if time.Now().After(give) {
			f.Close()
			return nil, fmt.Errorf("lock %s: still held after %v (by the recovery script or an upgrade); see journalctl -u %s", p, wait, layout.RecoveryUnit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func checkSHA(s string) error {
	if len(s) != 64 {
		return &RefusedError{Reason: fmt.Sprintf("--sha256 %q is not 64 hex digits", s)}
	}
	if _, err := hex.DecodeString(s); err != nil {
		return &RefusedError{Reason: fmt.Sprintf("--sha256 %q is not hex", s)}
	}
	return nil
}

// compareVersions compares semver versions (a leading "v" optional).
func compareVersions(a, b string) (int, bool) {
	canon := func(v string) string {
		if !strings.HasPrefix(v, "v") {
			v = "v" + v
		}
		return v
	}
	a, b = canon(a), canon(b)
	if !semver.IsValid(a) || !semver.IsValid(b) {
		return 0, false
	}
	return semver.Compare(a, b), true
}

func lock(l layout.Layout) (func(), error) {
	dir := l.OnRoot(l.StateDir())
	if err := fsutil.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := statePath(l, LockFile)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another agent-upgrade is running (it holds %s)", l.StateDir()+"/"+LockFile)
	}
	return func() { f.Close() }, nil
}

// staleAge is how old a link's temp file must be before cleanStale takes
// it for a leftover: the recovery script and seeding create one between a
// `ln` and a `mv`, and removing it there would make their rename fail.
const staleAge = time.Minute

// cleanStale removes temp files a killed upgrade left in the lib dir. No
// link ever names them. Candidates are only staged under the upgrade lock,
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

func checkNotInFlight(ctx context.Context, l layout.Layout, o Options) error {
	r, err := LoadInFlight(l)
	if err != nil || r == nil {
		return err
	}
	if time.Now().After(r.Deadline) && o.Manager.Live() {
		// A stale record (an agent-upgrade killed before it armed the
		// deadline timer): recovery resolves it, then we go on.
		o.Log.Info("resolving a stale upgrade record", "to", r.ToVersion, "deadline", r.Deadline.UTC().Format(time.RFC3339))
		if err := o.Manager.Start(ctx, layout.RecoveryUnit); err != nil {
			return fmt.Errorf("resolve the stale upgrade to %s: %w", r.ToVersion, err)
		}
		if r, err = LoadInFlight(l); err != nil || r == nil {
			return err
		}
	}
	return fmt.Errorf("an upgrade from %s to %s is already in flight (started %s, deadline %s); see aks-flex-node status",
		r.FromVersion, r.ToVersion, r.Started.UTC().Format(time.RFC3339), r.Deadline.UTC().Format(time.RFC3339))
}

func stage(l layout.Layout, src io.Reader) (path, sum string, err error) {
	f, err := os.CreateTemp(l.OnRoot(l.LibDir()), ".candidate-")
	if err != nil {
		return "", "", err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	if _, err = io.Copy(io.MultiWriter(f, h), src); err != nil {
		return "", "", err
	}
	if err = f.Chmod(0o755); err != nil {
		return "", "", err
	}
	if err = f.Sync(); err != nil {
		return "", "", err
	}
	if err = f.Close(); err != nil {
		return "", "", err
	}
	return f.Name(), hex.EncodeToString(h.Sum(nil)), nil
}

func waitOutcome(ctx context.Context, l layout.Layout, rec InFlight) (*Result, error) {
	// Recovery acts within a few seconds after the deadline; give it a
	// bounded margin before calling the outcome unknown.
	limit := time.Until(rec.Deadline) + 60*time.Second
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		r, err := LoadInFlight(l)
		if err != nil {
			return nil, err
		}
		if r == nil {
			res, err := LoadResult(l)
			if err != nil {
				return nil, err
			}
			if res == nil || res.ToVersion != rec.ToVersion || res.ToSlot != rec.ToSlot {
				return res, errors.New("the upgrade record was cleared but no matching result was written; see aks-flex-node status")
			}
			if res.Result != ResultUpgraded {
				return res, fmt.Errorf("upgrade to %s %s: %s", rec.ToVersion, res.Result, res.Reason)
			}
			return res, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no outcome for the upgrade to %s by %s; see aks-flex-node status and journalctl -u %s -u %s",
				rec.ToVersion, time.Now().UTC().Format(time.RFC3339), layout.AgentUnitName, layout.RecoveryUnit)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// armTimer starts the recovery timer, again if systemd cancels the start.
// A recovery check of an earlier upgrade that finds nothing in flight stops
// the timer with a job of its own; when that job lands while ours is queued,
// systemd cancels ours ("Job for aks-flex-node-recovery.timer canceled"),
// which says nothing about this upgrade. Seen in the upgrade tests when one
// upgrade followed another within the timer's two seconds.
func armTimer(ctx context.Context, m *systemd.Manager) error {
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		if err = m.Start(ctx, layout.RecoveryTimer); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
	return err
}
