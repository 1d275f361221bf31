package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/machineapi"
)

// readMachineRegistration is what the last AKS Machine registration did,
// start's or the agent's retry (nil: no target cluster, or no start yet).
func readMachineRegistration(l layout.Layout) (*machineapi.Record, error) {
	r, err := lifecycle.LoadMachineRegistration(l.OnRoot(l.MachineRegistration()))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", l.MachineRegistration(), err)
	}
	return &r, nil
}

// readMachineGoal is what the agent's follow-machine loop applied from
// the AKS Machine and decided last (nil: it has not run).
func readMachineGoal(l layout.Layout) (*machineapi.GoalRecord, error) {
	r, err := machineapi.LoadGoalRecord(l.OnRoot(l.MachineGoal()))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", l.MachineGoal(), err)
	}
	return &r, nil
}

// printMachine prints status's AKS Machine lines: the registration and
// the goal the agent follows.
func printMachine(w io.Writer, r *machineapi.Record, g *machineapi.GoalRecord) {
	if r == nil {
		fmt.Fprintln(w, "machine:    no AKS Machine (azure.targetCluster.resourceId is not set)")
		return
	}
	fmt.Fprintf(w, "machine:    %s", r.Line())
	if !r.Registered() {
		fmt.Fprint(w, " (the agent retries at each agent.machineReconcileInterval)")
	}
	fmt.Fprintln(w)
	if g != nil {
		fmt.Fprintf(w, "goal:       %s\n", g.Line())
	}
}
