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

// readMachineRegistration is what the last start's AKS Machine
// registration did (nil: no target cluster, or no start yet).
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

// printMachine prints status's AKS Machine line.
func printMachine(w io.Writer, r *machineapi.Record) {
	if r == nil {
		fmt.Fprintln(w, "machine:    no AKS Machine (azure.targetCluster.resourceId is not set)")
		return
	}
	fmt.Fprintf(w, "machine:    %s\n", r.Line())
}
