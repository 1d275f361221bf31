// Package agentupgrade owns the agent's blue/green self-upgrade: the two slots
// and the `current` and `last-good` links in the layout's lib dir, seeding
// them on first install, the atomic switch, the in-flight record, the new
// agent's confirmation, and the recovery script, unit and timer that roll
// back without a human when the new agent crashes, exits or does not
// confirm in time.
package agentupgrade

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/mod/semver"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/metrics"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/systemd"
	"github.com/Azure/aks-flex-node/internal/task"
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
	// Observer, when set, is told each step as it runs (a display on a
	// terminal); the wait for the outcome reports to it too.
	Observer task.Observer
	// Lock is how long to wait for the node lock while a start, a reset
	// or another agent-upgrade holds it; the zero value fails at once.
	Lock nodelock.Wait
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
//
// The steps (steps.go) run as tasks on a task.Runner, each logging one
// line under its step name and hitting its failpoint when done, in two
// phases: candidate (verified, tested), then, once the plan allows it,
// switch (slot-written, timer-armed, recorded, switched, restarted). Each
// hands its result to the next through a task.Output.
func Run(ctx context.Context, l layout.Layout, o Options) (*Outcome, error) {
	began := time.Now()
	if o.Deadline <= 0 {
		o.Deadline = DefaultDeadline
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if err := precheck(l, o); err != nil {
		return nil, err
	}
	// The node lock, for the whole run including the wait for the new
	// agent's confirmation: a start or reset in between would install or
	// remove the agent service under an upgrade in flight.
	lock, err := nodelock.Acquire(ctx, l, "agent-upgrade", o.Lock)
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	cleanStale(l)

	if err := checkNotInFlight(ctx, l, o); err != nil {
		return nil, err
	}
	plan, curInfo, err := currentPlan(ctx, l)
	if err != nil {
		return nil, err
	}
	store := metrics.OpenStore(l)
	r := &task.Runner{Log: o.Log, Observer: task.Observers(o.Observer, metrics.TaskErrors(store))}
	if o.Observer != nil {
		ctx = task.WithObserver(ctx, o.Observer)
	}
	cand := task.NewOutput[candidate](StepVerified)
	tested := task.NewOutput[buildinfo.Info](StepTested)
	// The staged candidate is gone after the rename into its slot; this
	// cleans up after a refusal.
	defer func() {
		if c, err := cand.Get(); err == nil {
			os.Remove(c.path)
		}
	}()
	if _, err := r.Phases(ctx, task.Phase{Name: "candidate", Tasks: []task.Task{
		verifyCandidate(l, o, cand),
		testCandidate(cand, tested),
	}}); err != nil {
		return nil, err
	}
	c, _ := cand.Get()
	info, _ := tested.Get()
	plan.Source, plan.SHA256, plan.ToVersion = c.source, c.sum, info.Version
	curSum, err := fileSHA256(slotPath(l, plan.FromSlot))
	if err != nil {
		return nil, err
	}
	if done, err := decide(&plan, curInfo, curSum == c.sum, o); done || err != nil {
		return &Outcome{Plan: plan}, err
	}
	rec := task.NewOutput[InFlight](StepRecorded)
	if _, err := r.Phases(ctx, task.Phase{Name: "switch", Tasks: []task.Task{
		writeSlot(l, cand, plan.ToSlot),
		armDeadline(o.Manager),
		recordUpgrade(l, o, plan, rec),
		switchToNew(l, rec, o.Log),
		restartAgent(o.Manager, plan.ToSlot),
	}}); err != nil {
		return nil, err
	}
	// The new agent confirms, or recovery rolls back. Wait for either.
	inFlight, _ := rec.Get()
	res, err := waitOutcome(ctx, l, inFlight)
	if res != nil {
		_ = store.Observe(metrics.OpUpgrade, map[string]string{"component": "agent", "result": res.Result}, time.Since(began))
	}
	return &Outcome{Plan: plan, Result: res}, err
}

// precheck refuses what needs no lock to refuse: a malformed checksum, a
// host whose systemd cannot be asked, an agent service not installed.
func precheck(l layout.Layout, o Options) error {
	if err := checkSHA(o.SHA256); err != nil {
		return err
	}
	if o.Preflight {
		return nil
	}
	if !o.Manager.Live() {
		return errors.New("agent-upgrade restarts the agent service and needs the running systemd of this host (not --root)")
	}
	for _, u := range append([]string{l.Units().Agent}, UnitPaths(l)...) {
		if _, err := os.Stat(l.OnRoot(u)); err != nil {
			return fmt.Errorf("the agent service is not installed (%w); run aks-flex-node install-service --config %s first", err, l.ConfigFile())
		}
	}
	return nil
}

// currentPlan reads the slots as they are, which must be seeded and
// settled, and test-runs the current one: the plan's from side and the
// slot the candidate goes to.
func currentPlan(ctx context.Context, l layout.Layout) (Plan, buildinfo.Info, error) {
	cur, err := linkSlot(l, l.UpgradeSlots().Current)
	if err != nil {
		return Plan{}, buildinfo.Info{}, err
	}
	good, err := linkSlot(l, l.UpgradeSlots().LastGood)
	if err != nil {
		return Plan{}, buildinfo.Info{}, err
	}
	if cur == "" || good == "" {
		return Plan{}, buildinfo.Info{}, fmt.Errorf("the upgrade slots in %s are not seeded (prefix %q): run aks-flex-node install-service --config %s first", l.LibDir(), l.Prefix(), l.ConfigFile())
	}
	if cur != good {
		return Plan{}, buildinfo.Info{}, fmt.Errorf("current (%s) and last-good (%s) differ with no upgrade in flight; the recovery unit repairs this: systemctl start %s", cur, good, layout.RecoveryUnit)
	}
	curInfo, err := TestRun(ctx, slotPath(l, cur))
	if err != nil {
		return Plan{}, buildinfo.Info{}, fmt.Errorf("current slot: %w", err)
	}
	return Plan{FromSlot: cur, FromVersion: curInfo.Version, ToSlot: other(l, cur)}, curInfo, nil
}

// decide compares the tested candidate with the current agent: the same
// binary is nothing to do, one not newer is refused without
// AllowDowngrade, and Preflight stops here. done means Run is finished.
// sameBinary says the candidate's SHA-256 is the current slot's.
func decide(plan *Plan, curInfo buildinfo.Info, sameBinary bool, o Options) (done bool, err error) {
	cmp, comparable := compareVersions(plan.ToVersion, curInfo.Version)
	switch {
	case sameBinary:
		plan.Unchanged = true
		return true, nil
	case !comparable || cmp <= 0:
		plan.Downgrade = true
		if !o.AllowDowngrade {
			why := "is not newer than"
			if !comparable {
				why = "cannot be ordered (not semver) against"
			}
			return true, &RefusedError{Reason: fmt.Sprintf("candidate %s %s the current %s; pass --allow-downgrade to install it anyway", plan.ToVersion, why, curInfo.Version)}
		}
	}
	return o.Preflight, nil
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
