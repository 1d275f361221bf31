package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/systemd"
)

func newInstallServiceCommand() *cobra.Command {
	var path, root string
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "install-service",
		Short: "Write, enable and start aks-flex-node-agent.service for the config's layout",
		Long: `On first install, seed the upgrade slots from the binary at the layout's
agentBinary (agent-blue, and the 'current' and 'last-good' links in the lib
dir) and make agentBinary a link to 'current'; a new regular file placed at
agentBinary on a seeded host (install.sh again) is adopted as current and
last-good. Write the recovery script, aks-flex-node-recovery.service and
aks-flex-node-recovery.timer (enabled: it checks for an interrupted upgrade at
boot), then render aks-flex-node-agent.service into /etc/systemd/system with
ExecStart=<libDir>/current agent --config <config>, reload systemd, enable and
start it. Re-running on an installed host changes nothing.

--config is a host path; with --root it is read under that root, and the unit
is written and enabled in that tree only (image baking).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := layout.ValidateUnitPath(path); err != nil {
				return invalidf("--config: %w", err)
			}
			c, err := loadConfig(mapConfigPath(root, path), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			l, err := c.Layout(root, path)
			if err != nil {
				return invalid(err)
			}
			log := logger(cmd.ErrOrStderr(), levelOf(c))
			lk, err := nodelock.Acquire(cmd.Context(), l, "install-service", lockWait(cmd, l, lockTimeout))
			if err != nil {
				return fmt.Errorf("install-service: %w", err)
			}
			defer lk.Release()
			changed, err := agentupgrade.InstallService(cmd.Context(), l, systemd.NewManager(root), log)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s installed (changed=%t): ExecStart=%s agent --config %s\n", layout.AgentUnitName, changed, l.UpgradeSlots().Current, path)
			return nil
		},
	}
	addConfigFlag(cmd, &path)
	cmd.Flags().StringVar(&root, "root", "/", "root directory of the host tree")
	addLockFlag(cmd, &lockTimeout)
	return cmd
}

func newUninstallServiceCommand() *cobra.Command {
	var path, root string
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "uninstall-service",
		Short: "Stop, disable and remove aks-flex-node-agent.service and the recovery unit and timer (the binary and its slots stay)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger(cmd.ErrOrStderr(), 0)
			// The unit dir does not depend on the prefix, but read the
			// config the way every systemd-facing entry point does.
			l, err := config.LookupLayout(root, path, log)
			if err != nil {
				return invalid(err)
			}
			lk, err := nodelock.Acquire(cmd.Context(), l, "uninstall-service", lockWait(cmd, l, lockTimeout))
			if err != nil {
				return fmt.Errorf("uninstall-service: %w", err)
			}
			defer lk.Release()
			removed, err := agentupgrade.UninstallService(cmd.Context(), l, systemd.NewManager(root), log)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s removed (changed=%t)\n", layout.AgentUnitName, removed)
			return nil
		},
	}
	addConfigFlag(cmd, &path)
	cmd.Flags().StringVar(&root, "root", "/", "root directory of the host tree")
	addLockFlag(cmd, &lockTimeout)
	return cmd
}

// mapConfigPath turns a host path given on the command line into the path
// this process opens when it works on another root.
func mapConfigPath(root, path string) string {
	l, err := layout.New(root, "", "")
	if err != nil {
		return path
	}
	return l.OnRoot(path)
}
