package cli

import (
	"errors"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/daemon"
	"github.com/Azure/aks-flex-node/internal/failpoint"
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
			c, err := daemon.WaitForConfig(ctx, path, log)
			var ie *config.InvalidError
			switch {
			case errors.As(err, &ie):
				return invalid(err)
			case err != nil:
				return err
			case c == nil:
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
			a, err := daemon.New(c, l, log)
			if err != nil {
				return invalid(err)
			}
			return a.Run(ctx)
		},
	}
	addConfigFlag(cmd, &path)
	return cmd
}
