package agentupgrade

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/systemd"
	"github.com/Azure/aks-flex-node/internal/task"
)

// A fleet release's agent binary is installed in two steps, far apart:
// Stage, while the node keeps serving and before it takes a fleet slot,
// and Apply, inside the slot. agent-upgrade (Run) does both at once and
// waits for the outcome; Apply cannot wait: it runs in the agent service
// it restarts.

// StageOptions are Stage's inputs: the binary's URL and SHA-256.
type StageOptions struct {
	URL, SHA256 string
	Log         *slog.Logger
	// Lock is how long to wait for the node lock.
	Lock nodelock.Wait
}

// ApplyOptions are Apply's inputs: the binary Stage staged (its URL, to
// stage it again if the slot no longer holds it), the deadline the new
// agent has to confirm itself, and the host's systemd.
type ApplyOptions struct {
	URL, SHA256 string
	Deadline    time.Duration
	Manager     *systemd.Manager
	Log         *slog.Logger
	Lock        nodelock.Wait
}

// Stage fetches the binary at o.URL (the transport policy, bounded),
// verifies its SHA-256 while it streams, test-runs it and renames it into
// the inactive slot, under the node lock. Nothing else changes: no link
// names the inactive slot and nothing is recorded in flight, so the agent
// keeps running and a staged binary that is never applied is harmless
// (the next upgrade overwrites it). A slot that holds the binary already
// is not fetched again; a current slot that is the binary says Unchanged.
// A checksum that does not match, or a binary that does not run, is a
// *RefusedError naming the URL (without credentials), expected and got.
func Stage(ctx context.Context, l layout.Layout, o StageOptions) (Plan, error) {
	if err := checkSHA(o.SHA256); err != nil {
		return Plan{}, err
	}
	lock, err := nodelock.Acquire(ctx, l, "agent-stage", o.Lock)
	if err != nil {
		return Plan{}, err
	}
	defer lock.Release()
	cleanStale(l)
	if r, err := LoadInFlight(l); err != nil {
		return Plan{}, err
	} else if r != nil {
		return Plan{}, fmt.Errorf("an agent upgrade from %s to %s is in flight (deadline %s): staging waits for it to be confirmed or rolled back",
			r.FromVersion, r.ToVersion, r.Deadline.UTC().Format(time.RFC3339))
	}
	plan, _, err := currentPlan(ctx, l)
	if err != nil {
		return Plan{}, err
	}
	return stageInto(ctx, l, o.URL, o.SHA256, logOr(o.Log), plan)
}

// Apply is the second half of a fleet release's agent upgrade: under the
// node lock, it points current at the slot Stage filled (staging it again
// first when an agent-upgrade ran in between), with the deadline timer
// armed and the in-flight record written as agent-upgrade does, and
// queues a restart of the agent service on it. It does not wait: the
// restart stops the agent that called it; the new agent confirms itself
// at its start, or recovery puts last-good back (a crash, an exit, no
// confirmation by the deadline). A release names the exact binary, so an
// older version is installed too (the release is the goal).
func Apply(ctx context.Context, l layout.Layout, o ApplyOptions) (Plan, error) {
	if err := checkSHA(o.SHA256); err != nil {
		return Plan{}, err
	}
	if o.Deadline <= 0 {
		o.Deadline = DefaultDeadline
	}
	log := logOr(o.Log)
	if o.Manager == nil || !o.Manager.Live() {
		return Plan{}, errors.New("applying an agent binary restarts the agent service and needs the running systemd of this host")
	}
	lock, err := nodelock.Acquire(ctx, l, "agent-upgrade", o.Lock)
	if err != nil {
		return Plan{}, err
	}
	defer lock.Release()
	cleanStale(l)
	if err := checkNotInFlight(ctx, l, Options{Manager: o.Manager, Log: log}); err != nil {
		return Plan{}, err
	}
	plan, _, err := currentPlan(ctx, l)
	if err != nil {
		return Plan{}, err
	}
	if plan, err = stageInto(ctx, l, o.URL, o.SHA256, log, plan); err != nil || plan.Unchanged {
		return plan, err
	}
	plan.Downgrade = !newer(plan.ToVersion, plan.FromVersion)
	r := &task.Runner{Log: log}
	rec := task.NewOutput[InFlight](StepRecorded)
	_, err = r.Phases(ctx, task.Phase{Name: "switch", Tasks: []task.Task{
		armDeadline(o.Manager),
		recordUpgrade(l, Options{Manager: o.Manager, Deadline: o.Deadline}, plan, rec),
		switchToNew(l, rec, log),
		step(StepRestarted, true, func(ctx context.Context) error {
			_ = o.Manager.ResetFailed(ctx, layout.AgentUnitName)
			if err := o.Manager.RestartNoBlock(ctx, layout.AgentUnitName); err != nil {
				return fmt.Errorf("restart the agent on %s (recovery rolls back at the deadline): %w", plan.ToSlot, err)
			}
			return nil
		}),
	}})
	return plan, err
}

// stageInto makes plan.ToSlot hold the binary of sha (fetched from rawURL
// unless it does already) and fills in the plan's to side; Unchanged when
// the current slot is that binary.
func stageInto(ctx context.Context, l layout.Layout, rawURL, sha string, log *slog.Logger, plan Plan) (Plan, error) {
	want := strings.ToLower(sha)
	plan.SHA256, plan.Source = want, redacted(rawURL)
	if cur, err := fileSHA256(slotPath(l, plan.FromSlot)); err != nil {
		return plan, fmt.Errorf("current slot: %w", err)
	} else if cur == want {
		plan.Unchanged, plan.ToSlot, plan.ToVersion = true, plan.FromSlot, plan.FromVersion
		return plan, nil
	}
	if have, _ := fileSHA256(slotPath(l, plan.ToSlot)); have != want {
		r := &task.Runner{Log: log}
		cand := task.NewOutput[candidate](StepVerified)
		defer func() {
			if c, err := cand.Get(); err == nil {
				os.Remove(c.path)
			}
		}()
		if _, err := r.Phases(ctx, task.Phase{Name: "stage", Tasks: []task.Task{
			verifyCandidate(l, Options{URL: rawURL, SHA256: want}, cand),
			writeSlot(l, cand, plan.ToSlot),
		}}); err != nil {
			return plan, err
		}
	}
	info, err := TestRun(ctx, slotPath(l, plan.ToSlot))
	if err != nil {
		return plan, &RefusedError{Reason: fmt.Sprintf("the agent binary from %s (staged in slot %s) does not run: %v", plan.Source, plan.ToSlot, err)}
	}
	plan.ToVersion = info.Version
	return plan, nil
}

// newer says whether version a is newer than b (false when either is not
// semver).
func newer(a, b string) bool {
	cmp, ok := compareVersions(a, b)
	return ok && cmp > 0
}

func redacted(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}

func logOr(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// RolledBackSince is the result recovery left when it undid an upgrade
// (rolled-back, or aborted before the switch) at or after since: the
// evidence a fleet release's agent step reports. nil when there is none.
func RolledBackSince(l layout.Layout, since time.Time) (*Result, error) {
	res, err := LoadResult(l)
	if err != nil || res == nil || (res.Result != ResultRolledBack && res.Result != ResultAborted) {
		return nil, err
	}
	at, err := time.Parse(time.RFC3339, res.Time)
	if err != nil || at.Before(since.Truncate(time.Second)) {
		return nil, nil
	}
	return res, nil
}

// CurrentSHA256 is the SHA-256 of the binary the agent service runs: the
// slot current names, read under the layout's root (the link itself is an
// absolute host path); on a host whose slots are not seeded, the agent
// binary's.
func CurrentSHA256(l layout.Layout) (string, error) {
	cur, err := linkSlot(l, l.UpgradeSlots().Current)
	if err != nil || cur == "" {
		return fileSHA256(l.OnRoot(l.AgentBinary()))
	}
	return fileSHA256(slotPath(l, cur))
}
