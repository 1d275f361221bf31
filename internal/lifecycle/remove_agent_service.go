package lifecycle

import (
	"context"
	"log/slog"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/systemd"
	"github.com/Azure/aks-flex-node/internal/task"
)

type removeAgentService struct {
	layout layout.Layout
	mgr    *systemd.Manager
	log    *slog.Logger
}

// RemoveAgentService returns the task that stops and removes the agent
// service and the recovery unit and timer (agentupgrade.UninstallService).
func RemoveAgentService(l layout.Layout, mgr *systemd.Manager, log *slog.Logger) task.Task {
	return &removeAgentService{layout: l, mgr: mgr, log: log}
}

func (t *removeAgentService) Name() string { return "remove-agent-service" }

func (t *removeAgentService) Do(ctx context.Context) (task.Result, error) {
	changed, err := agentupgrade.UninstallService(ctx, t.layout, t.mgr, t.log)
	return task.Result{Changed: changed}, err
}
