package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
)

// rolloutStatus is status's rollout section: the agent's record of the
// rollout that selects the node (rollout.json), and every config key the
// cluster's goal sets over the config file with its source, as start
// runs them (lifecycle.LoadGoal).
type rolloutStatus struct {
	// Record is nil when no rollout ever selected the node.
	Record *fleet.Record `json:"record"`
	// Sources are the keys the cluster's goal sets (a rollout's applied
	// release, or the AKS Machine's goal) and where each came from.
	Sources []lifecycle.GoalSource `json:"sources,omitempty"`
	// Error is why the record or the goal cannot be read, or why start
	// would refuse them (two goals), with what to do.
	Error string `json:"error,omitempty"`
}

// readRollout is status's rollout section. A record that cannot be read
// is shown, not fatal: status is where an operator looks next.
func readRollout(l layout.Layout) rolloutStatus {
	var st rolloutStatus
	rec, err := fleet.LoadRecord(l.OnRoot(l.RolloutRecord()))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		st.Error = fmt.Sprintf("%s cannot be read: %v; start refuses until it is repaired or removed (see start --help)", l.RolloutRecord(), err)
		return st
	default:
		st.Record = &rec
	}
	cfg, err := config.Load(l.OnRoot(l.ConfigFile()))
	if err != nil {
		// Without the file the release's keys still have a source; what
		// the file says is unknown.
		if a := st.applied(); a != nil {
			c, src := a.Overlay(&config.Config{})
			for _, s := range src {
				st.Sources = append(st.Sources, lifecycle.GoalSource{Key: s.Key, From: s.From, Value: lifecycle.GoalValue(c, s.Key), File: "(config unreadable)"})
			}
		}
		return st
	}
	g, err := lifecycle.LoadGoal(l, cfg)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	st.Sources = g.Sources
	return st
}

func (st rolloutStatus) applied() *fleet.AppliedRelease {
	if st.Record == nil {
		return nil
	}
	return st.Record.Applied
}

// printRollout prints status's rollout lines: the rollout, its
// generation, the node's phase, step, since, reason and slot; the
// release a rollout moved the node to; each key the cluster's goal sets.
func printRollout(w io.Writer, st rolloutStatus) {
	switch r := st.Record; {
	case r == nil && st.Error == "":
		fmt.Fprintln(w, "rollout:    none selected this node")
	case r != nil:
		fmt.Fprintf(w, "rollout:    %s\n", r.Line())
		if a := r.Applied; a != nil {
			fmt.Fprintf(w, "release:    %s applied at %s\n", a.From(), a.At.UTC().Format(time.RFC3339))
		} else {
			fmt.Fprintln(w, "release:    none applied (the node runs its config file's)")
		}
		if p := r.Previous; p != nil {
			fmt.Fprintf(w, "retained:   %s on the other side (applied at %s)\n", p.From(), p.At.UTC().Format(time.RFC3339))
		}
		if n := len(r.UnsentEvents); n > 0 {
			fmt.Fprintf(w, "events:     %d phase-change Events wait for the API server\n", n)
		}
	}
	if st.Error != "" {
		fmt.Fprintf(w, "rollout:    %s\n", st.Error)
	}
	if len(st.Sources) > 0 {
		fmt.Fprintln(w, "overlay:    the cluster's goal over the config file, as start runs it:")
	}
	for _, s := range st.Sources {
		fmt.Fprintf(w, "  %s\n", s)
	}
}
