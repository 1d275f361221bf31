package lifecycle

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/task"
)

type seedAgentSlots struct {
	host Host
}

// SeedAgentSlots returns the task that seeds the agent's upgrade slots
// from the binary at the layout's agent binary (agentupgrade.Seed, which
// install-agent-service runs again later and finds done). It runs before
// the machine starts because a node that joins with an Azure identity
// runs the current slot's binary inside the machine as its credential
// plugin. What would make it fail is refused by the agent-binary check.
func SeedAgentSlots(h Host) task.Task { return &seedAgentSlots{host: h} }

func (t *seedAgentSlots) Name() string { return "seed-agent-slots" }

func (t *seedAgentSlots) Do(ctx context.Context) (task.Result, error) {
	res, err := agentupgrade.Seed(ctx, t.host.Layout)
	if err != nil {
		return task.Result{}, err
	}
	return task.Result{Changed: res.Changed, Detail: "current slot " + res.Slot}, nil
}
