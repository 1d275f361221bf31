package refdocs

import (
	_ "embed"
	"fmt"
	"strings"
)

// The notes files are two-column Markdown tables: a name the code owns
// (a config key, a check, a task) and what the code cannot say about it.
var (
	//go:embed notes/config.md
	configNotesFile string
	//go:embed notes/config_intro.md
	configIntro string
	//go:embed notes/config_upstream_intro.md
	configUpstreamIntro string
	//go:embed notes/preflight.md
	preflightNotesFile string
	//go:embed notes/commands.md
	commandNotesFile string
	//go:embed notes/layout.md
	layoutNotes string
	//go:embed notes/phases.md
	phaseNotesFile string
)

// parseNotes reads the rows `| name | text |` of a notes table; the name
// may be in backquotes. The header row and its rule are skipped.
func parseNotes(file string) (map[string]string, []string, error) {
	notes := map[string]string{}
	var order []string
	for i, line := range strings.Split(file, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") || strings.HasPrefix(line, "| name |") {
			continue
		}
		cells := strings.SplitN(strings.Trim(line, "|"), " | ", 2)
		if len(cells) != 2 {
			return nil, nil, fmt.Errorf("line %d: want `| name | text |`, got %q", i+1, line)
		}
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		if _, dup := notes[name]; dup {
			return nil, nil, fmt.Errorf("line %d: %s has a note already", i+1, name)
		}
		notes[name] = strings.TrimSpace(cells[1])
		order = append(order, name)
	}
	return notes, order, nil
}
