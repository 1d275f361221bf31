package state

import (
	"path/filepath"
	"time"

	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// SidesFile, in the state dir, records the node's blue/green pair: which
// machine is active, what each side runs, the repave in flight and the
// last one. `node upgrade` writes it (under the node lock) before and
// after each step that changes which side serves; `status` reads it.
const SidesFile = "sides.json"

// Side is what one machine of the pair was last prepared with.
type Side struct {
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	Image             string `json:"image,omitempty"`
	ImageDigest       string `json:"imageDigest,omitempty"`
	// Failed is why a repave to this side was rolled back; the side is
	// kept for inspection until the next repave prepares it again.
	Failed string `json:"failed,omitempty"`
}

// Repave results.
const (
	RepaveSucceeded  = "succeeded"
	RepaveRolledBack = "rolled-back"
	RepaveFailed     = "failed" // refused or failed before the active side stopped
	// RepaveInterrupted is a repave whose process died (kill -9, a power
	// cut) before it closed its record: the agent, or the next `node
	// upgrade`, closed it (Sides.CloseInterrupted).
	RepaveInterrupted = "interrupted"
)

// Repave is one repave: from which side and version to which, when, the
// step it is at (in flight) and how it ended.
type Repave struct {
	FromMachine string        `json:"fromMachine"`
	ToMachine   string        `json:"toMachine"`
	FromVersion string        `json:"fromVersion"`
	ToVersion   string        `json:"toVersion"`
	Started     time.Time     `json:"started"`
	Step        string        `json:"step,omitempty"`
	Finished    time.Time     `json:"finished,omitzero"`
	Duration    time.Duration `json:"duration,omitempty"`
	Result      string        `json:"result,omitempty"`
	Reason      string        `json:"reason,omitempty"`
	// WasUnschedulable says the Node was cordoned before this repave's
	// drain: closing an interrupted repave leaves it so.
	WasUnschedulable bool `json:"wasUnschedulable,omitempty"`
	// SwitchBack marks a switch back to the retained side (issue 30): it
	// prepares nothing, so an interrupted one leaves that side usable.
	SwitchBack bool `json:"switchBack,omitempty"`
}

// Sides is the content of SidesFile.
type Sides struct {
	Active   string          `json:"active"`
	Machines map[string]Side `json:"machines"`
	InFlight *Repave         `json:"inFlight,omitempty"`
	Last     *Repave         `json:"last,omitempty"`
}

// saveSides writes s to dir atomically (0600).
func saveSides(dir string, s Sides) error {
	_, err := fsutil.WriteJSON(filepath.Join(dir, SidesFile), s)
	return err
}

// loadSides reads the sides record in dir. A host that joined and never
// repaved has none: its pair is derived from the applied state (the
// active side and what it runs). (nil, nil) when neither exists.
func loadSides(dir string) (*Sides, error) {
	var s Sides
	found, err := fsutil.ReadJSON(filepath.Join(dir, SidesFile), &s)
	if err != nil {
		return nil, err
	}
	if found {
		if s.Machines == nil {
			s.Machines = map[string]Side{}
		}
		return &s, nil
	}
	a, err := loadApplied(dir)
	if err != nil || a == nil {
		return nil, err
	}
	return &Sides{Active: a.Machine, Machines: map[string]Side{
		a.Machine: {KubernetesVersion: a.KubernetesVersion, Image: a.Image, ImageDigest: a.ImageDigest},
	}}, nil
}
