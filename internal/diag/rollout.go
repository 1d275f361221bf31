package diag

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/preflight"
)

// checkRollout: the rollout that selects the node, from the agent's
// record in the state dir (debug asks the cluster nothing here; the
// node's FlexNodeRelease condition says the same to the cluster). A
// record that cannot be read, a node that failed its rollout (it keeps
// its slot, so the rollout waits), a node that does not run the release
// it records, and two cluster goals start would refuse are warnings: the
// node serves meanwhile.
func checkRollout(e *Env) preflight.Check {
	l := e.Layout
	return preflight.NewCheck(NameRollout, l.RolloutRecord(), func(context.Context) preflight.Result {
		rec, err := fleet.LoadRecord(l.OnRoot(l.RolloutRecord()))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return preflight.OK("no rollout selected this node")
		case err != nil:
			return preflight.Warning("repair the file, or remove it and set the config file's components.kubernetes, bootstrap.ociImage and bootstrap.offlineArtifacts.source to what the node runs; start refuses until then",
				"the rollout record cannot be read: %v", err)
		}
		if e.Config != nil {
			var conflict *lifecycle.GoalConflictError
			if _, err := lifecycle.LoadGoal(l, e.Config); errors.As(err, &conflict) {
				return preflight.Warning("remove azure.targetCluster.resourceId from the config to keep the rollout's release, or remove "+l.RolloutRecord()+" to follow the AKS Machine", "%v", err)
			}
		}
		if rec.Phase == fleet.PhaseFailed {
			return preflight.Warning(fmt.Sprintf("fix what the reason names, then run `aks-flex-node fleet resume %s` with an admin's kubeconfig", rec.Rollout),
				"%s; the node keeps its slot, so the rollout waits", rec.Line())
		}
		if off := e.offRelease(rec); off != "" {
			return preflight.Warning("run aks-flex-node start: it repaves the node to the release (the agent does too at its next rollout pass)", "%s; %s", rec.Line(), off)
		}
		if rec.Applied == nil {
			return preflight.OK("%s; no release applied yet", rec.Line())
		}
		return preflight.OK("%s; runs the release of %s", rec.Line(), rec.Applied.From())
	})
}

// offRelease says how the active machine differs from the release the
// record says the node runs; "" when it does not, when no release was
// applied, and while the node is Updating (the switch is under way).
func (e *Env) offRelease(rec fleet.Record) string {
	a, err := e.Applied()
	if rec.Applied == nil || rec.Phase == fleet.PhaseUpdating || err != nil || a == nil {
		return ""
	}
	r := rec.Applied.Release
	var off []string
	if v := r.KubernetesVersion; v != "" && strings.TrimPrefix(v, "v") != strings.TrimPrefix(a.KubernetesVersion, "v") {
		off = append(off, fmt.Sprintf("machine %s runs Kubernetes %s, the release %s", a.Machine, a.KubernetesVersion, v))
	}
	if v := r.WorkerImage; v != "" && v != a.Image {
		off = append(off, fmt.Sprintf("machine %s runs worker image %s, the release %s", a.Machine, orUnknown(a.Image), v))
	}
	return strings.Join(off, "; ")
}
