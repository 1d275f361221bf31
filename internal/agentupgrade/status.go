package agentupgrade

import (
	"context"
	"os"

	"github.com/Azure/aks-flex-node/internal/layout"
)

// SlotStatus describes one slot.
type SlotStatus struct {
	Name    string `json:"name"`
	Path    string `json:"path"`
	Present bool   `json:"present"`
	Version string `json:"version,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
	Error   string `json:"error,omitempty"`
}

// LinkStatus describes a link.
type LinkStatus struct {
	Path  string `json:"path"`
	Slot  string `json:"slot,omitempty"`
	Error string `json:"error,omitempty"`
}

// Status is what `aks-flex-node status` shows about the agent binary.
type Status struct {
	Prefix         string       `json:"prefix"`
	ConfigFile     string       `json:"configFile"`
	AgentBinary    string       `json:"agentBinary"`
	CurrentVersion string       `json:"currentVersion,omitempty"`
	Current        LinkStatus   `json:"current"`
	LastGood       LinkStatus   `json:"lastGood"`
	Slots          []SlotStatus `json:"slots"`
	InFlight       *InFlight    `json:"inFlight"`
	Last           *Result      `json:"lastResult"`
}

// GetStatus reads the slots, links and records. Slot versions come from
// test-running each slot, which only works on the live root.
func GetStatus(ctx context.Context, l layout.Layout) (*Status, error) {
	s := &Status{Prefix: l.Prefix(), ConfigFile: l.ConfigFile(), AgentBinary: l.AgentBinary()}
	versions := map[string]string{}
	for _, p := range []string{l.UpgradeSlots().Blue, l.UpgradeSlots().Green} {
		name := p[len(l.LibDir())+1:]
		st := SlotStatus{Name: name, Path: p}
		if _, err := os.Stat(l.OnRoot(p)); err == nil {
			st.Present = true
			st.SHA256, _ = fileSHA256(l.OnRoot(p))
			if l.Root() == "/" {
				if info, err := TestRun(ctx, l.OnRoot(p)); err != nil {
					st.Error = err.Error()
				} else {
					st.Version = info.Version
					versions[name] = info.Version
				}
			}
		}
		s.Slots = append(s.Slots, st)
	}
	for _, lk := range []struct {
		path string
		out  *LinkStatus
	}{{l.UpgradeSlots().Current, &s.Current}, {l.UpgradeSlots().LastGood, &s.LastGood}} {
		lk.out.Path = lk.path
		slot, err := linkSlot(l, lk.path)
		if err != nil {
			lk.out.Error = err.Error()
		} else if slot == "" {
			lk.out.Error = "absent"
		}
		lk.out.Slot = slot
	}
	s.CurrentVersion = versions[s.Current.Slot]
	var err error
	if s.InFlight, err = LoadInFlight(l); err != nil {
		return s, err
	}
	if s.Last, err = LoadResult(l); err != nil {
		return s, err
	}
	return s, nil
}
