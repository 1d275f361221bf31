package daemon

import (
	"context"
	"time"

	"github.com/Azure/aks-flex-node/internal/kubeclient"

	"github.com/Azure/aks-flex-node/internal/recovery"
)

// RepairRepaveInterrupted is the repair kind of a repave the agent found
// interrupted (its process killed, the host's power cut) and finished.
const RepairRepaveInterrupted = "repave-interrupted"

// finishRepaveLoop names the loop in logs and as the node lock's holder.
const finishRepaveLoop = "finish-repave"

// FinishRepave is the loop that finishes an interrupted repave by
// internal/recovery's rule, the one keep-machine follows too (the
// applied state's side runs, the other is stopped): it also uncordons the
// Node the repave cordoned and closes the in-flight record as
// "interrupted", which `status` shows. Remote: the uncordon needs the API
// server; until then keep-machine keeps the machines right. A pass asks
// the API server nothing unless the local in-flight record says a repave
// was interrupted (rare, and then one Get and one Patch of its Node), so
// the loop costs the fleet nothing on its timer.
func FinishRepave(k *MachineKeeper, client func() (kubeclient.Interface, error), nodeName string) Loop {
	return Loop{Name: finishRepaveLoop, Run: func(ctx context.Context) error {
		return finishRepave(ctx, k, client, nodeName)
	}}
}

func finishRepave(ctx context.Context, k *MachineKeeper, client func() (kubeclient.Interface, error), nodeName string) error {
	if joined, err := k.joined(); err != nil || !joined || !recovery.InFlight(k.Layout) {
		return err
	}
	// A repave in flight holds the node lock for its whole run: taken
	// here, the record's process is gone.
	release, ok, err := lockOrSkip(k.Layout, k.Log, finishRepaveLoop)
	if err != nil || !ok {
		return err
	}
	defer release()
	rec, err := recovery.Repave(ctx, recovery.Env{Layout: k.Layout, Control: k.Control, Client: client, NodeName: nodeName,
		Log: k.Log, StartTimeout: startTimeout, StopTimeout: stopTimeout, Now: time.Now})
	if rec != nil {
		k.repaired(ctx, RepairRepaveInterrupted, "repave "+rec.FromMachine+" -> "+rec.ToMachine+" interrupted: "+rec.Reason)
	}
	return err
}
