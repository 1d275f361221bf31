package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/ignition"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/preflight"
)

func newPreflightCommand() *cobra.Command {
	var path, output, customData, imds string
	var opts preflight.Options
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "Check that this host can join the cluster, changing nothing",
		Long: `Run every preflight check against this host and the config: user, OS,
install layout (agent.hostPrefix), host tools, systemd, cgroups, swap, kernel
modules, disk space, an earlier install, offline artifacts, the worker image
(resolved under the transport policy), the API server, the bootstrap token
or the Azure identity (a token from its endpoint, not cached), what the
cluster lets the kubelet's credential do, and the provisioning payloads the host received (Azure
customData, IMDS userData: an Ignition config on a host that does not run
Ignition, or one that installs the agent under /usr on ACL, is an error). Checks run concurrently; output is in a fixed order.

The config checked is the one start runs: on a node a rollout or its AKS
Machine moved, the cluster's goal over the config file (see "start --help"),
each key the goal set named on stderr with its source.

Preflight changes nothing on the host: its only write is a test executable in
a temp dir it creates next to the agent's bin dir and removes again. It loads
no kernel module.

Exit status: 0 when no error remains, 1 when one does (or a warning, with
--fail-on-warnings), 2 for bad usage. Errors of named checks (or all) are
reported as warnings with --ignore-preflight-errors.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if err := opts.Validate(preflight.DefaultNames); err != nil {
				return invalid(err)
			}
			c, err := loadConfig(path, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			l, err := c.Layout("/", path)
			if err != nil {
				return invalid(err)
			}
			// What start would run: the cluster's goal over the file.
			if c, err = goalConfig(c, l, "preflight", cmd.ErrOrStderr()); err != nil {
				return fmt.Errorf("preflight: %w", err)
			}
			env := preflightEnv(c, path, l)
			if cmd.Flags().Changed("custom-data") {
				env.Provisioning.CustomData = customData
			}
			if cmd.Flags().Changed("imds-endpoint") {
				env.Provisioning.AskIMDS(imds)
			}
			report := checkHost(cmd.Context(), env, opts)
			out := cmd.OutOrStdout()
			if output == "json" {
				err = writeJSON(out, report)
			} else {
				err = report.WriteText(out)
			}
			if err != nil {
				return err
			}
			if report.Failed(opts.FailOnWarnings) {
				return &exitError{code: ExitFailure, err: errSilent}
			}
			return nil
		},
	}
	addConfigFlag(cmd, &path)
	preflight.AddFlags(cmd.Flags(), &opts)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.Flags().StringVar(&customData, "custom-data", ignition.DefaultCustomDataPath, "Azure customData file provisioning-payload reads (env "+ignition.EnvCustomData+")")
	cmd.Flags().StringVar(&imds, "imds-endpoint", ignition.DefaultIMDSEndpoint, `IMDS base URL provisioning-payload asks for userData, or "off" (env `+ignition.EnvIMDSEndpoint+"); without either, IMDS is asked only on an Azure VM (its SMBIOS chassis asset tag)")
	return cmd
}

// preflightEnv is what the preflight checks look at on this host for the
// config c, read from path and laid out as l: the one place start,
// preflight, node upgrade and the support bundle make it. The host's
// provisioning payloads are looked for where the process environment
// says (ignition.SourcesFromEnv); preflight's flags may move them.
func preflightEnv(c *config.Config, path string, l layout.Layout) *preflight.Env {
	src := ignition.SourcesFromEnv("/")
	return &preflight.Env{Root: "/", Config: c, ConfigFile: path, Layout: l, Provisioning: &src}
}

// checkHost runs every preflight check on env outside a start (the
// preflight command, a support bundle), the source checks wired as start
// wires them: a start that runs nothing, so nothing is staged or unpacked.
func checkHost(ctx context.Context, env *preflight.Env, opts preflight.Options) preflight.Report {
	lifecycle.NewStart(lifecycle.Options{Layout: env.Layout, Config: env.Config, ConfigFile: env.ConfigFile}).WireChecks(env)
	return preflight.Run(ctx, preflight.Checks(env), opts)
}

// preflightReport is `preflight --output json` for the config at path,
// for a support bundle.
func preflightReport(path string) func(context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		c, err := loadConfig(path, io.Discard) // a support bundle records the report, not the notes
		if err != nil {
			return nil, err
		}
		l, err := c.Layout("/", path)
		if err != nil {
			return nil, err
		}
		if c, err = goalConfig(c, l, "preflight", io.Discard); err != nil {
			return nil, err
		}
		return checkHost(ctx, preflightEnv(c, path, l), preflight.Options{}), nil
	}
}
