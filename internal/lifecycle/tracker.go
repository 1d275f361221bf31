package lifecycle

import (
	"errors"
	"os"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/state"
)

// Tracker records host paths before start creates them, so reset can
// remove them even after a crash half-way through start. It opens the
// state dir's tracker on first use; the state dir itself is recorded
// when this run is the one that creates it.
type Tracker struct {
	layout layout.Layout
	t      *state.Tracker
}

// NewTracker is the tracker of the state dir of l.
func NewTracker(l layout.Layout) *Tracker { return &Tracker{layout: l} }

// Add records host paths.
func (tr *Tracker) Add(paths ...string) error {
	if tr.t == nil {
		store := state.Open(tr.layout)
		dir := store.Dir()
		_, statErr := os.Stat(dir)
		if err := fsutil.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		t, err := store.Tracker()
		if err != nil {
			return err
		}
		tr.t = t
		if errors.Is(statErr, os.ErrNotExist) {
			if err := t.Add(tr.layout.StateDir()); err != nil {
				return err
			}
		}
	}
	return tr.t.Add(paths...)
}
