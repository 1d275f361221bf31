package diag

import (
	"io"

	"github.com/Azure/aks-flex-node/internal/preflight"
)

// WriteText writes the report as preflight's is written, a line per
// check in order, each warning and error followed by its remedy, then a
// summary line.
func (r Report) WriteText(w io.Writer) error {
	ew := preflight.NewTextWriter(w)
	if r.Joined {
		ew.Printf("[debug] Checking node %s in machine %s, as the node, against %s\n", r.Node, r.Machine, orUnknown(r.Server))
	} else {
		ew.Printf("[debug] Checking this host\n")
	}
	for _, c := range r.Checks {
		ew.Check("", c)
	}
	if r.Skipped != "" {
		ew.Printf("[debug] Skipped: %s\n", r.Skipped)
	}
	s := r.Summary
	ew.Printf("[debug] %d ok, %d warnings, %d errors in %s: %s\n", s.OK, s.Warnings, s.Errors, r.Took, r.Status)
	return ew.Err()
}
