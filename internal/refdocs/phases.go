package refdocs

import (
	"fmt"
	"strings"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/preflight"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/task"
)

// phaseLists are the lifecycle's phase lists as the commands build them,
// for an empty config on a cgroup v2 host (the lists do not depend on
// either).
func phaseLists() (start, reset, repave []task.Phase) {
	start = lifecycle.NewStart(lifecycle.Options{Config: &config.Config{}}).Phases("v2")
	reset = lifecycle.ResetPhases(lifecycle.Options{})
	r := lifecycle.NewRepave(lifecycle.RepaveOptions{Options: lifecycle.Options{Config: &config.Config{}}}, state.Applied{Machine: layout.MachineBlue})
	repave = append(r.Phases("v2"), r.RollbackPhase())
	return start, reset, repave
}

// Phases renders the phase lists of start, reset and the repave, with
// the notes on tasks.
func Phases() (string, error) {
	notes, _, err := parseNotes(phaseNotesFile)
	if err != nil {
		return "", fmt.Errorf("notes/phases.md: %w", err)
	}
	start, reset, repave := phaseLists()
	var b strings.Builder
	b.WriteString("# Phases of `start`, `reset` and the repave\n\n")
	b.WriteString("Each command is a list of phases of small idempotent tasks (`task.Phase` in\n" +
		"`internal/lifecycle`). Each task logs one line\n" +
		"(`task=<name> status=ok changed=<bool> duration=...`) and each phase one\n" +
		"(`phase=<name> ...`); `start --help` and `node upgrade --help` print the\n" +
		"same lists from the same code. A second `start` on a converged host changes\n" +
		"nothing and says so.\n\n")
	b.WriteString("## start\n\n")
	writePhases(&b, []task.Phase{{Name: lifecycle.PreflightPhase}}, start, notes,
		"the checks of [preflight](preflight.md) (`start`'s list); any error refuses before the host changes")
	b.WriteString("## reset\n\n")
	b.WriteString("`reset` undoes `start` exactly; it keeps the agent binary and the install record (`uninstall.sh` removes those).\n\n")
	writePhases(&b, nil, reset, notes, "")
	b.WriteString("## node upgrade (the repave)\n\n")
	fmt.Fprintf(&b, "`node upgrade`, and `start` with a config that names another Kubernetes version or worker image, "+
		"repave onto the other machine. Until `%s`'s first task the active machine serves untouched; "+
		"a failure in `%s` runs `rollback`.\n\n", lifecycle.SwitchPhase, lifecycle.SwitchPhase)
	writePhases(&b, []task.Phase{{Name: lifecycle.PreflightPhase}}, repave, notes,
		"the checks "+code(preflight.RepaveNames)+"; any error refuses before anything changes")
	return b.String(), nil
}

func writePhases(b *strings.Builder, pre, phases []task.Phase, notes map[string]string, preText string) {
	b.WriteString("| phase | tasks |\n|---|---|\n")
	for _, p := range pre {
		fmt.Fprintf(b, "| `%s` | %s |\n", p.Name, preText)
	}
	for _, p := range phases {
		var tasks []string
		for _, n := range p.Names() {
			t := "`" + n + "`"
			if note, ok := notes[n]; ok {
				t += " (" + note + ")"
			}
			tasks = append(tasks, t)
		}
		fmt.Fprintf(b, "| `%s` | %s |\n", p.Name, strings.Join(tasks, ", "))
	}
	b.WriteString("\n")
}

func code(names []string) string {
	return "`" + strings.Join(names, "`, `") + "`"
}

// taskNames are the names of every task in the lifecycle's lists.
func taskNames() map[string]bool {
	start, reset, repave := phaseLists()
	out := map[string]bool{}
	for _, list := range [][]task.Phase{start, reset, repave} {
		for _, p := range list {
			for _, n := range p.Names() {
				out[n] = true
			}
		}
	}
	return out
}
