package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/bootstrap"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/daemon"
	"github.com/Azure/aks-flex-node/internal/failpoint"
	"github.com/Azure/aks-flex-node/internal/kubeapi"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/upgrade"
)

func newAgentCommand() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the long-running agent (started by aks-flex-node-agent.service)",
		Long: `Run the agent in the foreground until SIGTERM. It waits, with backoff,
for the config file and for the API server rather than exiting, so systemd's
start limit is never reached because a cluster is not yet reachable. An
invalid config exits 2, which the unit does not restart.

On a joined host it keeps the node's machine running: every
agent.machineReconcileInterval it starts the machine if it is stopped (after
a reboot nothing else does), without waiting for the API server.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			failpoint.Hit(upgrade.StepAgentStart)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			log := logger(cmd.ErrOrStderr(), 0)
			c, err := waitForConfig(ctx, path, log)
			if err != nil {
				return err
			}
			if c == nil {
				return nil // stopped while waiting
			}
			log = logger(cmd.ErrOrStderr(), levelOf(c))
			l, err := c.Layout("/", path)
			if err != nil {
				return invalid(err)
			}
			// An upgrade in flight to this agent's slot is confirmed now,
			// before waiting for the cluster: health here means this
			// binary runs, reads its config and finds its layout. An
			// error exits 1 and recovery rolls back.
			//
			// Confirming at start rather than after the agent has run for
			// a while is deliberate: what the agent does later depends on
			// the cluster (an upgrade must neither wait for it nor be
			// rolled back because it is away), and what an agent binary
			// can break on its own shows by now. A crash after the
			// confirmation is handled by Restart=, on the new slot.
			if _, err := upgrade.Confirm(l, upgrade.RunningSlot(l), log); err != nil {
				return err
			}
			interval, _ := time.ParseDuration(c.Agent.MachineReconcileInterval)
			a := &daemon.Agent{Config: c, Layout: l, Log: log, Interval: interval}
			keeper := &bootstrap.MachineKeeper{Layout: l, Control: &machine.Control{}, Log: log}
			a.Maintain = keeper.Keep
			if srv := c.Node.Kubelet.ClusterFQDN; srv != "" {
				client, err := kubeapi.New(srv, c.CAPEM(), 10*time.Second)
				if err != nil {
					return invalid(fmt.Errorf("node.kubelet.caCertData: %w", err))
				}
				a.WaitFor = "API server " + srv
				a.Ready = client.Reachable
			}
			return a.Run(ctx)
		},
	}
	addConfigFlag(cmd, &path)
	return cmd
}

// waitForConfig waits for the config file to appear: a unit started before
// Ignition or an operator put the file in place should wait, not crash-loop.
// nil, nil means the agent was stopped while waiting.
func waitForConfig(ctx context.Context, path string, log interface {
	Info(string, ...any)
}) (*config.Config, error) {
	backoff := time.Second
	for {
		c, err := config.Load(path)
		if err == nil {
			return c, nil
		}
		var ie *config.InvalidError
		if errors.As(err, &ie) {
			return nil, invalid(err)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("config: %w", err)
		}
		log.Info("waiting", "for", "config file "+path, "error", err, "retry-in", backoff)
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}
