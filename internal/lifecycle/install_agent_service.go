package lifecycle

import (
	"context"
	"log/slog"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/systemd"
	"github.com/Azure/aks-flex-node/internal/task"
)

type installAgentService struct {
	host Host
	log  *slog.Logger
}

// InstallAgentService returns the task that installs and starts the agent
// service (agentupgrade.InstallService, the same code as install-service): on
// a host whose binary was placed at the layout's agent binary (Ignition),
// this seeds the upgrade slots. What would make it fail is refused by the
// agent-binary preflight check, before the node joins.
func InstallAgentService(h Host, log *slog.Logger) task.Task {
	return &installAgentService{host: h, log: log}
}

func (t *installAgentService) Name() string { return "install-agent-service" }

func (t *installAgentService) Do(ctx context.Context) (task.Result, error) {
	l := t.host.Layout
	if err := t.host.track(append([]string{l.Units().Agent}, agentupgrade.UnitPaths(l)...)...); err != nil {
		return task.Result{}, err
	}
	changed, err := agentupgrade.InstallService(ctx, l, systemd.NewManager(l.Root()), t.log)
	return task.Result{Changed: changed}, err
}
