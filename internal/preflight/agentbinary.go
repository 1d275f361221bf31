package preflight

import (
	"context"
	"fmt"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
)

// agentBinaryCheck asks whether start's install-agent-service task will
// be able to seed the upgrade slots from the agent binary at the layout's
// path (agentupgrade.CheckSeed). That task runs last, after the node joined; a
// failure there would leave a node in the cluster without its agent, so
// start refuses now instead. `all` in --ignore-preflight-errors does not
// cover this check (see explicitIgnoreOnly): ignoring it cannot make start
// succeed, only fail after the join.
func agentBinaryCheck(e *Env) Check {
	return NewCheck(NameAgentBinary, e.Layout.AgentBinary(), func(ctx context.Context) Result {
		if err := agentupgrade.CheckSeed(ctx, e.Layout); err != nil {
			return Error(fmt.Sprintf("install the agent binary for prefix %q at %s (install.sh does), or repair what the message names; "+
				"start installs the agent service after the node joined, so it refuses first. --ignore-preflight-errors=all does not cover this check; name %s to ignore it",
				e.Layout.Prefix(), e.Layout.AgentBinary(), NameAgentBinary),
				"install-agent-service would fail: %v", err)
		}
		return OK("the agent service can be installed from %s", e.Layout.AgentBinary())
	})
}
