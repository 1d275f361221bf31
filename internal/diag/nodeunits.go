package diag

import (
	"context"
	"fmt"

	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/preflight"
)

// checkContainerd and checkKubelet: the node's units in the machine are
// active, and not restarting over and over.
func checkContainerd(e *Env) preflight.Check {
	return checkMachineUnit(e, NameContainerd, node.ContainerdUnitName)
}

func checkKubelet(e *Env) preflight.Check {
	return checkMachineUnit(e, NameKubelet, node.KubeletUnitName)
}

func checkMachineUnit(e *Env, name, unit string) preflight.Check {
	return preflight.NewCheck(name, unit+" in the machine", func(ctx context.Context) preflight.Result {
		p := e.units(ctx)
		if p.machineErr != nil {
			return preflight.Error("see machine", "%s not checked: %v", unit, p.machineErr)
		}
		st, ok := p.machine[unit]
		start := fmt.Sprintf("start it: nsenter -t $(machinectl show %s -p Leader --value) -a systemctl start %s", e.machineName(), unit)
		switch {
		case !ok || st.Active == "":
			return preflight.Error("the machine lacks the node's units; aks-flex-node start writes them", "%s is not known in machine %s", unit, e.machineName())
		case st.Active != "active":
			return preflight.Error(start+"; why it stopped: "+e.unitHint(unit),
				"%s in machine %s is %s (result %s), restarts %d", unit, e.machineName(), st, orUnknown(st.Result), st.Restarts)
		case st.Restarts >= restartsWarning:
			return preflight.Warning("see why it restarts: "+e.unitHint(unit),
				"%s in machine %s is %s, but systemd restarted it %d times", unit, e.machineName(), st, st.Restarts)
		}
		return preflight.OK("%s in machine %s is %s, restarts %d", unit, e.machineName(), st, st.Restarts)
	})
}
