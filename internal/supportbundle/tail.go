package supportbundle

import (
	"context"
	"fmt"
	"strconv"

	"github.com/Azure/aks-flex-node/internal/fsroot"
	"github.com/Azure/aks-flex-node/internal/machine"
)

// JournalTail is the end of one unit's journal in machine m, for the
// evidence a failed rollout node attaches (internal/fleet): at most
// lines lines and max bytes (cut at a line start, marked), redacted as
// the bundle redacts (its patterns and the host config's literal
// secrets), with the count of redactions. A running machine's journal is
// read by its own journalctl inside its namespaces; a stopped one's from
// its journal directory inside its root (the failed side after a
// rollback is stopped). o's Layout, Exec and Stream are used as Collect
// uses them.
func JournalTail(ctx context.Context, o Options, m, unit string, lines int, maxBytes int64) ([]byte, int, error) {
	o.defaults()
	c := &collector{o: o}
	args := []string{"--no-pager", "-o", "short-iso", "-n", strconv.Itoa(max(lines, 1)), "-u", unit}
	ctl := &machine.Control{Run: o.Exec}
	var out []byte
	var err error
	if st, serr := ctl.State(ctx, m); serr == nil && st == "active" {
		pid, lerr := ctl.Leader(ctx, m)
		if lerr != nil {
			return nil, 0, fmt.Errorf("journal of %s in machine %s: %w", unit, m, lerr)
		}
		out, err = c.runTail(ctx, maxBytes, "nsenter", append([]string{"-t", strconv.Itoa(pid), "-a", "--", "journalctl"}, args...)...)
	} else {
		l := o.Layout
		dir, rerr := fsroot.Resolve(l.OnRoot(l.MachineDir(m)), "/var/log/journal")
		if rerr != nil {
			return nil, 0, fmt.Errorf("journal of %s in machine %s: %w", unit, m, rerr)
		}
		out, err = c.runTail(ctx, maxBytes, "journalctl", append([]string{"-D", dir}, args...)...)
	}
	red := newRedactor(c.configSecrets())
	out = red.redact(out)
	if err != nil {
		return out, red.count, fmt.Errorf("journal of %s in machine %s: %w", unit, m, err)
	}
	return out, red.count, nil
}
