package refdocs

import (
	"fmt"
	"strings"

	"github.com/Azure/aks-flex-node/internal/preflight"
)

// Preflight renders the preflight checks: the lists `preflight`, `start`
// and `node upgrade` run, in their order, with what each looks at.
func Preflight() (string, error) {
	notes, _, err := parseNotes(preflightNotesFile)
	if err != nil {
		return "", fmt.Errorf("notes/preflight.md: %w", err)
	}
	runs := map[string][]string{}
	for _, l := range []struct {
		cmd   string
		names []string
	}{{"preflight", preflight.DefaultNames}, {"start", preflight.StartNames}, {"node upgrade", preflight.RepaveNames}} {
		for _, n := range l.names {
			runs[n] = append(runs[n], "`"+l.cmd+"`")
		}
	}
	var b strings.Builder
	b.WriteString("# Preflight checks\n\n")
	b.WriteString("`preflight` runs these checks concurrently and reports them in this order; it\n" +
		"changes nothing on the host. `start` runs the same as its first phase, plus\n" +
		"its own checks at the end of the list; `node upgrade` runs its own short list.\n" +
		"A check's name is what `--ignore-preflight-errors` takes (names never change:\n" +
		"scripts read them from `--output json`). Each result is `[OK]`, `[WARNING]`\n" +
		"or `[ERROR]`, with a remedy when it is not OK.\n\n")
	b.WriteString("| check | run by | looks at |\n|---|---|---|\n")
	seen := map[string]bool{}
	for _, list := range [][]string{preflight.StartNames, preflight.RepaveNames} {
		for _, n := range list {
			if seen[n] {
				continue
			}
			seen[n] = true
			note, ok := notes[n]
			if !ok {
				return "", fmt.Errorf("check %s has no note in internal/refdocs/notes/preflight.md", n)
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", n, strings.Join(runs[n], ", "), note)
		}
	}
	b.WriteString("\n")
	return b.String(), nil
}

// checkNames are the names of every check some command runs.
func checkNames() map[string]bool {
	out := map[string]bool{}
	for _, list := range [][]string{preflight.StartNames, preflight.RepaveNames} {
		for _, n := range list {
			out[n] = true
		}
	}
	return out
}
