package diag

import (
	"fmt"
	"io"

	"github.com/Azure/aks-flex-node/internal/preflight"
)

// WriteText writes the report as preflight's is written, a line per
// check in order, each warning and error followed by its remedy, then a
// summary line.
func (r Report) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	if r.Joined {
		ew.printf("[debug] Checking node %s in machine %s, as the node, against %s\n", r.Node, r.Machine, orUnknown(r.Server))
	} else {
		ew.printf("[debug] Checking this host\n")
	}
	for _, c := range r.Checks {
		switch c.Severity {
		case preflight.SeverityOK:
			ew.printf("[OK %s]: %s\n", c.Name, c.Message)
		case preflight.SeverityWarning:
			ew.printf("[WARNING %s]: %s\n", c.Name, c.Message)
			ew.printf("\tremedy: %s\n", c.Remedy)
		default:
			ew.printf("[ERROR %s]: %s\n", c.Name, c.Message)
			ew.printf("\tremedy: %s\n", c.Remedy)
		}
	}
	if r.Skipped != "" {
		ew.printf("[debug] Skipped: %s\n", r.Skipped)
	}
	s := r.Summary
	ew.printf("[debug] %d ok, %d warnings, %d errors in %s: %s\n", s.OK, s.Warnings, s.Errors, r.Took, r.Status)
	return ew.err
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
