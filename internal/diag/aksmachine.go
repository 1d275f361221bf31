package diag

import (
	"context"
	"errors"
	"io/fs"

	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/machineapi"
	"github.com/Azure/aks-flex-node/internal/preflight"
)

// checkAKSMachine: the node's AKS Machine is registered (by start, or the
// agent's retry) and the goal the agent follows from it is applied, from
// what they recorded in the state dir (debug asks ARM nothing). A
// registration that failed, a decision that waits or holds, and the last
// error are warnings: the node runs, AKS does not see (or drive) it yet.
func checkAKSMachine(e *Env) preflight.Check {
	l := e.Layout
	return preflight.NewCheck(NameAKSMachine, l.MachineRegistration(), func(context.Context) preflight.Result {
		reg, err := lifecycle.LoadMachineRegistration(l.OnRoot(l.MachineRegistration()))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return preflight.OK("no AKS Machine (azure.targetCluster.resourceId is not set)")
		case err != nil:
			return preflight.Warning("run aks-flex-node start again to register the Machine", "the registration record cannot be read: %v", err)
		case !reg.Registered():
			return preflight.Warning("grant the node's Azure identity the right on the Machine (code "+orUnknown(reg.Code)+"); the agent retries at each agent.machineReconcileInterval",
				"%s", reg.Line())
		}
		goal, err := machineapi.LoadGoalRecord(l.OnRoot(l.MachineGoal()))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return preflight.OK("%s; the agent has not followed its goal yet", reg.Line())
		case err != nil:
			return preflight.Warning("the agent rewrites it at its next pass", "the goal record %s cannot be read: %v", l.MachineGoal(), err)
		case goal.Error != "" || goal.Decision == machineapi.ActionHold:
			return preflight.Warning("see the agent's follow-machine lines: journalctl -u aks-flex-node-agent", "%s", goal.Line())
		}
		return preflight.OK("%s; %s", reg.Line(), goal.Line())
	})
}
