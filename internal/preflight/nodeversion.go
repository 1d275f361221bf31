package preflight

import (
	"context"
	"fmt"
	"strings"

	"github.com/Azure/aks-flex-node/internal/state"
)

// nodeVersionCheck asks whether start would change the Kubernetes version
// of a node that already runs. start installs components into the active
// machine in place, with no drain, skew check or way back; moving a node
// between versions is `node upgrade`'s blue/green repave. And `node
// upgrade` does not edit the config, so after one the config names the
// version the node left: a start then would quietly undo the repave. Both
// are refused here, before anything changes. A host with no node yet (no
// applied state, no sides record) passes.
func nodeVersionCheck(e *Env) Check {
	dir := e.Layout.OnRoot(e.Layout.StateDir())
	return NewCheck(NameNodeVersion, e.Layout.StateDir(), func(ctx context.Context) Result {
		sides, err := state.LoadSides(dir)
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
		how := "start"
		if sides.Last != nil && sides.Last.ToMachine == sides.Active {
			how = fmt.Sprintf("node upgrade, %s", sides.Last.Finished.UTC().Format("2006-01-02T15:04:05Z"))
		}
		return Error(fmt.Sprintf("set components.kubernetes to %s in %s to keep the node as it is (node upgrade does not edit the config), or move the node with `aks-flex-node node upgrade --kubernetes-version %s`, which drains it and can roll back",
			have, e.ConfigFile, want),
			"machine %s runs Kubernetes %s (%s) but the config says %s: start would install %s into the running machine in place, with no drain and no way back",
			sides.Active, have, how, want, want)
	})
}
