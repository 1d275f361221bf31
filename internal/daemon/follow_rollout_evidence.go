package daemon

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/state"
)

// Issue 30 item 7 on this host: rolloutHost is a fleet.EvidenceHost.

// Evidence is how the agent gathers a failed rollout node's evidence.
// The command passes supportbundle's functions in (supportbundle reaches
// this package through diag, so it cannot be imported here).
type Evidence struct {
	// Journal reads the end of a unit's journal in a machine, redacted
	// (supportbundle.JournalTail).
	Journal fleet.JournalReader
	// Bundle writes the debug bundle at path, as this process opens it
	// (supportbundle.Collect).
	Bundle func(ctx context.Context, path string) error
}

// Option is an option of New.
type Option func(*options)

type options struct {
	evidence Evidence
}

// WithEvidence has a failed rollout node attach its journals and write
// the debug bundle through e.
func WithEvidence(e Evidence) Option { return func(o *options) { o.evidence = e } }

// keptBundles is how many failure bundles the state dir keeps, newest
// first: a rollout retried many times must not fill the disk.
const keptBundles = 3

// bundlePrefix names the failure bundles in the state dir.
const bundlePrefix = "rollout-failure-"

// FailureEvidence names the failed side, attaches the end of its kubelet
// and containerd journals and writes the debug bundle into the state dir,
// naming its path. Each part that cannot be had is left out; the
// failure is reported all the same.
func (h *rolloutHost) FailureEvidence(ctx context.Context, e *fleet.Evidence) {
	e.Side = h.failedSide(e)
	if h.evidence.Journal != nil && e.Side != "" {
		e.CollectJournals(ctx, h.evidence.Journal)
	}
	if h.evidence.Bundle == nil {
		return
	}
	l := h.layout
	name := bundlePrefix + e.At.UTC().Format("20060102T150405Z") + ".tar.gz"
	if err := h.evidence.Bundle(ctx, l.OnRoot(filepath.Join(l.StateDir(), name))); err != nil {
		h.log.Warn(followRolloutLoop+": write the debug bundle of the failure", "error", err)
		return
	}
	e.Bundle = filepath.Join(l.StateDir(), name)
	h.pruneBundles()
}

// failedSide is the machine whose journals tell the failure: the side a
// switch (or a switch back) tried, which does not serve after its
// rollback; the serving side when the failure is in it (a soak, a
// drain, staging).
func (h *rolloutHost) failedSide(e *fleet.Evidence) string {
	sides, err := state.Open(h.layout).Sides()
	if err != nil || sides == nil || sides.Active == "" {
		return ""
	}
	tried := e.Reason == "RolledBack"
	if !tried && (e.Step == fleet.StepSwitch || e.Step == fleet.StepRollback) && sides.Last != nil && sides.Last.Result != state.RepaveSucceeded {
		tried = sides.Last.ToMachine != sides.Active
	}
	if tried {
		return h.layout.OtherMachine(sides.Active)
	}
	return sides.Active
}

// pruneBundles removes all but the newest keptBundles failure bundles.
func (h *rolloutHost) pruneBundles() {
	dir := h.layout.OnRoot(h.layout.StateDir())
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), bundlePrefix) && e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names) // the UTC stamp sorts by time
	for len(names) > keptBundles {
		_ = os.Remove(filepath.Join(dir, names[0]))
		names = names[1:]
	}
}
