package preflight

import (
	"context"
	"strings"

	"github.com/Azure/aks-flex-node/internal/state"
)

// nodeVersionCheck is start's version-skew check. On a node that already
// runs, a config that names another Kubernetes version makes start
// repave the node onto the other machine (as node upgrade does), and the
// new kubelet must be one the API server supports: not newer, at most
// MaxKubeletSkew minor versions older (KubeletSkew, probed through
// env.ServerVersion, which start sets when it repaves). A version change
// start would not repave (the state does not say which machine serves,
// as after a crash in the middle of a repave) would install the version
// into the running machine in place, and is refused. A host with no node
// yet, and a node at the config's version, pass.
func nodeVersionCheck(e *Env) Check {
	store := state.Open(e.Layout)
	return NewCheck(NameNodeVersion, e.Layout.StateDir(), func(ctx context.Context) Result {
		sides, err := store.Sides()
		if err != nil {
			return Error("repair or remove the file the message names (reset removes it with the node)", "cannot read the node's machines: %v", err)
		}
		if sides == nil || sides.Active == "" {
			return OK("no node on this host yet")
		}
		have := sides.Machines[sides.Active].KubernetesVersion
		want := e.Config.Components.Kubernetes
		if have == "" || strings.TrimPrefix(have, "v") == strings.TrimPrefix(want, "v") {
			return OK("machine %s runs Kubernetes %s, as the config says", sides.Active, want)
		}
		if e.ServerVersion == nil {
			return Error("run `aks-flex-node status` to see which machine serves, and `aks-flex-node node upgrade --kubernetes-version "+want+"` to move the node",
				"machine %s runs Kubernetes %s but the config says %s, and the node's state does not say which machine start would repave: start would install %s into the running machine in place, with no drain and no way back",
				sides.Active, have, want, want)
		}
		server, err := e.ServerVersion(ctx)
		if err != nil {
			return Error("check that the API server is reachable with the node's credential", "cannot read the API server's version: %v", err)
		}
		if err := KubeletSkew(want, server); err != nil {
			return Error("set components.kubernetes in "+e.ConfigFile+" to a version at most the API server's and at most 3 minor versions older ("+have+" keeps the node as it is)", "start would repave machine %s from Kubernetes %s: %v", sides.Active, have, err)
		}
		return OK("start repaves machine %s from Kubernetes %s to %s: kubelet %s against API server %s", sides.Active, have, want, want, server)
	})
}
