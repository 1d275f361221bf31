package lifecycle

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/network"
	"github.com/Azure/aks-flex-node/internal/task"
)

type applyHostRoutes struct {
	host Host
	c    *config.Config
}

// ApplyHostRoutes returns the task that makes the host's owned routes
// (network.RouteProtocol) hostRouting's static routes: it adds the
// missing ones and removes owned routes the config no longer names. Only
// on the running host: an image tree under --root has no routes. The
// agent's keep-host-routes loop applies the same list after a reboot.
func ApplyHostRoutes(h Host, c *config.Config) task.Task { return &applyHostRoutes{host: h, c: c} }

func (t *applyHostRoutes) Name() string { return "apply-host-routes" }

func (t *applyHostRoutes) Do(ctx context.Context) (task.Result, error) {
	if t.host.Layout.Root() != "/" {
		return task.Result{}, nil
	}
	changed, err := network.Routes{Run: t.host.Exec}.Apply(ctx, network.StaticRoutes(t.c))
	return task.Result{Changed: changed}, err
}
