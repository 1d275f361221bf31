package daemon

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/machineapi"
)

// The provisioning states the node reports on its Machine in in-cluster
// mode, as upstream's agent names them.
const (
	statusSucceeded   = "Succeeded"
	statusReconciling = "Reconciling"
	statusFailed      = "Failed"
)

// writeStatus reports the pass on the Machine where the node may write
// it (in-cluster mode: upstream's agent PATCHes the status there; ARM's
// Machine status is read-only to a node): the state, the settings
// version applied and the decision or error. It writes only a status
// that differs from the last one it wrote, so a steady pass sends
// nothing; a failure is logged and the next pass tries again.
func (f *MachineFollower) writeStatus(ctx context.Context, cl machineapi.Backend, obs machineapi.Observed, rec machineapi.GoalRecord) {
	w, ok := cl.(machineapi.StatusWriter)
	if !ok || obs.Machine == nil || rec.Decision == machineapi.ActionReset {
		return
	}
	st := machineapi.Status{ProvisioningState: statusSucceeded, ObservedSettingsVersion: rec.ETag, Message: string(rec.Decision) + ": " + rec.Reason}
	switch {
	case rec.Error != "":
		st.ProvisioningState = statusFailed
		st.Message += "; last error: " + rec.Error
	case rec.Decision == machineapi.ActionWaitForNodeDeletion || rec.Decision == machineapi.ActionHold:
		st.ProvisioningState = statusReconciling
	}
	if len(st.Message) > maxConditionMessage {
		st.Message = st.Message[:maxConditionMessage]
	}
	if f.lastStatus != nil && *f.lastStatus == st {
		return
	}
	if err := w.PatchStatus(ctx, st); err != nil {
		f.Keeper.Log.Warn(followMachineLoop+": write the Machine's status", "machine", cl.Describe(), "error", err)
		return
	}
	f.lastStatus = &st
}
