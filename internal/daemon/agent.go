package daemon

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/kubeapi"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
)

// New is the agent for config c on layout l: on a joined host it keeps
// the node's machine running, every agent.machineReconcileInterval and
// without waiting for the cluster; when the config names an API server,
// it waits for it, with backoff, before any loop that needs the cluster.
// An error is the config's.
func New(c *config.Config, l layout.Layout, log *slog.Logger) (*Agent, error) {
	interval, _ := time.ParseDuration(c.Agent.MachineReconcileInterval)
	a := &Agent{Layout: l, Log: log, Interval: interval}
	a.Loops = append(a.Loops, KeepMachine(&MachineKeeper{Layout: l, Control: &machine.Control{}, Log: log}))
	if srv := c.Node.Kubelet.ClusterFQDN; srv != "" {
		client, err := kubeapi.New(srv, c.CAPEM(), 10*time.Second)
		if err != nil {
			return nil, fmt.Errorf("node.kubelet.caCertData: %w", err)
		}
		a.WaitFor = "API server " + srv
		a.Ready = client.Reachable
	}
	return a, nil
}
