package lifecycle

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/network"
	"github.com/Azure/aks-flex-node/internal/task"
)

type removeHostRoutes struct{ host Host }

// RemoveHostRoutes returns reset's task that removes every route marked
// with network.RouteProtocol, and no other route.
func RemoveHostRoutes(h Host) task.Task { return &removeHostRoutes{host: h} }

func (t *removeHostRoutes) Name() string { return "remove-host-routes" }

func (t *removeHostRoutes) Do(ctx context.Context) (task.Result, error) {
	if t.host.Layout.Root() != "/" {
		return task.Result{}, nil
	}
	changed, err := network.Routes{Run: t.host.Exec}.RemoveAll(ctx)
	return task.Result{Changed: changed}, err
}

type removeBridgeNetwork struct{ host Host }

// RemoveBridgeNetwork returns reset's task that removes what the node's
// pod network left in the host's network namespace (which the machine
// shares), after the machines have stopped: the bridge and its veths,
// the chains of the CNI plugins and the kubelet with the rules that jump
// to them (in nft and in iptables-legacy), the plugins' nft tables, and
// the tables the node made that are now empty (network.RemoveNetfilter).
// Tables and chains are judged against start's record of the host: with
// no record, no table is removed beyond the plugins' own.
func RemoveBridgeNetwork(h Host) task.Task { return &removeBridgeNetwork{host: h} }

func (t *removeBridgeNetwork) Name() string { return "remove-bridge-network" }

func (t *removeBridgeNetwork) Do(ctx context.Context) (task.Result, error) {
	if t.host.Layout.Root() != "/" {
		return task.Result{}, nil
	}
	c := network.Cleaner{Routes: network.Routes{Run: t.host.Exec}}
	changed, err := c.RemoveBridge(ctx)
	if err != nil {
		return task.Result{Changed: changed}, err
	}
	rec, ok, err := loadHostNetworkRecord(t.host)
	if err != nil {
		return task.Result{Changed: changed}, err
	}
	removed, err := c.RemoveNetfilter(ctx, rec.Before, ok)
	return task.Result{Changed: changed || removed}, err
}
