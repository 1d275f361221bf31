package diag

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/preflight"
)

// restartsWarning is how many automatic restarts of a unit are worth a
// warning: one can be a race at boot, three are a pattern.
const restartsWarning = 3

// checkMachine: the machine's unit on the host is active.
func checkMachine(e *Env) preflight.Check {
	return preflight.NewCheck(NameMachine, machine.ServiceName(e.machineName()), func(ctx context.Context) preflight.Result {
		p := e.units(ctx)
		unit := machine.ServiceName(e.machineName())
		if p.hostErr != nil {
			return preflight.Error("check that systemd runs this host (systemctl status)", "systemctl show %s: %v", unit, p.hostErr)
		}
		st := p.host[unit]
		if st.Active != "active" {
			return preflight.Error("the agent starts it within agent.machineReconcileInterval (see agent); to start it now: machinectl start "+e.machineName()+"; why it stopped: journalctl -u "+unit,
				"%s is %s (result %s)", unit, st, orUnknown(st.Result))
		}
		if st.Restarts >= restartsWarning {
			return preflight.Warning("see why it restarts: journalctl -u "+unit, "%s is %s, but systemd restarted it %d times", unit, st, st.Restarts)
		}
		return preflight.OK("%s is %s, restarts %d", unit, st, st.Restarts)
	})
}
