package diag

import (
	"context"
	"os"
	"time"

	"github.com/Azure/aks-flex-node/internal/preflight"
)

func (e *Env) joinedMarker() bool {
	_, err := os.Stat(e.Layout.OnRoot(e.Layout.JoinedMarker()))
	return err == nil
}

// checkJoined: start finished on this host (its marker and applied state
// are there). Everything else debug looks at exists only then.
func checkJoined(e *Env) preflight.Check {
	return preflight.NewCheck(NameJoined, e.Layout.JoinedMarker(), func(context.Context) preflight.Result {
		a, err := e.Applied()
		switch {
		case err != nil:
			return preflight.Error("run aks-flex-node reset, then aks-flex-node start, to record the node again",
				"the applied state cannot be trusted: %v", err)
		case a == nil || !e.joinedMarker():
			return preflight.Error("run aks-flex-node start (it runs preflight first); aks-flex-node debug bundle collects what there is",
				"this host has not joined a cluster: no %s or no applied state in %s", e.Layout.JoinedMarker(), e.Layout.StateDir())
		}
		return preflight.OK("node %s in machine %s since %s: Kubernetes %s, worker image digest %s, joined by agent %s",
			a.NodeName, e.machineName(), a.AppliedAt.UTC().Format(time.RFC3339), a.KubernetesVersion, orUnknown(a.ImageDigest), a.AgentVersion)
	})
}
