package state

import (
	"errors"
	"path/filepath"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// Store is the node's record in one state dir: the applied state and the
// blue/green sides. Every reader and writer of those files goes through
// it, so where they live and which machine is active are decided here
// and nowhere else.
type Store struct {
	dir string
}

// Open is the store in layout l's state dir, as this process opens it
// (under l's root).
func Open(l layout.Layout) Store { return Store{dir: l.OnRoot(l.StateDir())} }

// OpenDir is the store in dir, a state dir already resolved (a test's
// temp dir, a tool that was handed the dir itself).
func OpenDir(dir string) Store { return Store{dir: dir} }

// Dir is the state dir the store reads and writes.
func (s Store) Dir() string { return s.dir }

// Applied is the state of the converged join; (nil, nil) when there is
// none.
func (s Store) Applied() (*Applied, error) { return loadApplied(s.dir) }

// SaveApplied records a converged join; false when the file already said
// so (see saveApplied).
func (s Store) SaveApplied(a Applied) (bool, error) { return saveApplied(s.dir, a) }

// Sides is the blue/green pair; (nil, nil) on a host that never joined
// (see loadSides).
func (s Store) Sides() (*Sides, error) { return loadSides(s.dir) }

// SaveSides records the pair.
func (s Store) SaveSides(x Sides) error { return saveSides(s.dir, x) }

// RecordRepair records one repair of the agent's (see recordRepair).
func (s Store) RecordRepair(r Repair) error { return recordRepair(s.dir, r) }

// Repairs are the agent's last repairs, oldest first.
func (s Store) Repairs() ([]Repair, error) { return lastRepairs(s.dir) }

// RemovePending removes what writes of the store's files cut short by
// kill -9 or a power cut left beside them (renameio's pending files,
// fsutil.RemovePending): no later write reuses such a name, so without
// this a crashed start's ".created.json<digits>" stays for good. The
// caller holds the node lock, as every writer of these files does.
func (s Store) RemovePending() error {
	var errs []error
	for _, name := range []string{AppliedFile, AppliedFile + ".sha256", TrackerFile, SidesFile, RepairsFile} {
		errs = append(errs, fsutil.RemovePending(filepath.Join(s.dir, name)))
	}
	return errors.Join(errs...)
}

// Tracker is the install tracker (empty when there is none yet).
func (s Store) Tracker() (*Tracker, error) { return openTracker(s.dir) }

// ActiveMachine is the machine the node runs in (Applied.ActiveMachine of
// the stored state). A state that is missing or cannot be read names the
// first side: the agent's loops and the support bundle must still know
// where to look on a host whose state is damaged, and whoever reads the
// state for a decision (repave, reset) reads its error through Applied.
func (s Store) ActiveMachine() string {
	a, err := s.Applied()
	if err != nil {
		a = nil
	}
	return a.ActiveMachine()
}

// ActiveMachine is the machine the node runs in: the one the applied
// state names, or the first side (the one a first start provisions)
// when there is no state or it names none. This is the one place the
// rule is written; a nil *Applied is a host that never joined.
func (a *Applied) ActiveMachine() string {
	if a != nil && a.Machine != "" {
		return a.Machine
	}
	return layout.MachineBlue
}
