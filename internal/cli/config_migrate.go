package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/google/renameio/v2"
	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/config"
)

const migrateLong = `Rewrite an upstream AKS Flex Node config.json into aks-flex-node's schema.

Upstream's legacy keys move to their names here (kubernetes.version to
components.kubernetes, node.kubelet.serverURL to node.kubelet.clusterFQDN,
...), upstream's names of the US Government cloud become
AzureUSGovernmentCloud, and upstream keys are removed when aks-flex-node
has no use for them (the ARM keys upstream's generator writes, npd.version)
or when their value states what it does anyway (agent.requireMachineRegistration
false, paths at their defaults, ...). Every other upstream key is kept and
listed as refused: it does something upstream that aks-flex-node does not,
so removing it is your call.
agent.hostPrefix stays unset unless --host-prefix gives it.

The report (a unified diff of what changed, secrets redacted, the changes,
the refused keys, and whether the result loads) goes to standard error, or
to standard output with --output. The migrated config goes to --output,
written atomically (mode 0600 when it holds a secret, whatever mode a
file it replaces had; otherwise 0644 or the replaced file's mode), or to
standard output. The input is never written unless --output names it.
A config already in this schema comes back byte for byte.

The migrated config is written even when it does not load yet, so that you
can finish it; the exit code says which: 0 when it loads as it is, 2 when
refused keys remain or it does not validate, 1 when a file cannot be read
or written.`

func newConfigMigrateCommand() *cobra.Command {
	var from, output, hostPrefix string
	cmd := &cobra.Command{
		Use:   "migrate --from FILE [--output FILE] [--host-prefix P]",
		Short: "Rewrite an upstream AKS Flex Node config into this schema",
		Long:  migrateLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				return invalidf("config migrate: --from is required")
			}
			data, err := config.ReadFile(from)
			if err != nil {
				var ie *config.InvalidError
				if errors.As(err, &ie) {
					return invalid(fmt.Errorf("config migrate: %w", err))
				}
				return fmt.Errorf("config migrate: %w", err)
			}
			m, err := config.Migrate(data, config.MigrateOptions{HostPrefix: hostPrefix})
			if err != nil {
				return invalid(fmt.Errorf("config migrate: %s: %w", from, err))
			}
			report, dest := cmd.ErrOrStderr(), "(standard output)"
			if output != "" {
				report, dest = cmd.OutOrStdout(), output
				if err := writeMigrated(output, m.Output, m.Secret); err != nil {
					return fmt.Errorf("config migrate: write %s: %w", output, err)
				}
			} else if _, err := cmd.OutOrStdout().Write(m.Output); err != nil {
				return fmt.Errorf("config migrate: write the config: %w", err)
			}
			writeMigrateReport(report, m, from, dest)
			if !m.Valid() {
				return &exitError{code: ExitInvalid, err: errSilent}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "upstream config file to read")
	cmd.Flags().StringVarP(&output, "output", "o", "", "file to write the migrated config to (default: standard output)")
	cmd.Flags().StringVar(&hostPrefix, "host-prefix", "", "set agent.hostPrefix (upstream has no such key; it is never guessed)")
	return cmd
}

// writeMigrated writes the migrated config atomically. A config that holds
// a secret is 0600 whatever mode an existing file had: renameio.WriteFile
// copies an existing file's mode, which would leave a client secret in a
// file that was 0644. Without a secret an existing file keeps its mode.
func writeMigrated(output string, data []byte, secret bool) error {
	if !secret {
		return renameio.WriteFile(output, data, 0o644)
	}
	// Created 0600 before it holds a byte; chmod 0600 regardless of umask.
	pf, err := renameio.NewPendingFile(output, renameio.WithPermissions(0o600), renameio.WithStaticPermissions(0o600))
	if err != nil {
		return err
	}
	defer func() { _ = pf.Cleanup() }()
	if _, err := pf.Write(data); err != nil {
		return err
	}
	return pf.CloseAtomicallyReplace()
}

// writeMigrateReport says what migrate did, what it left, and whether the
// result loads.
func writeMigrateReport(w io.Writer, m *config.Migration, from, dest string) {
	switch {
	case !m.Changed() && len(m.Refused) == 0:
		fmt.Fprintf(w, "%s is already in aks-flex-node's schema: nothing to change\n", from)
	case !m.Changed():
		fmt.Fprintf(w, "%s: nothing that migrate can change\n", from)
	default:
		fmt.Fprint(w, m.Diff(from, dest))
		fmt.Fprintln(w, "changed:")
		for _, c := range m.Changes {
			fmt.Fprintln(w, "  "+c)
		}
	}
	if len(m.Refused) > 0 {
		fmt.Fprintln(w, "refused (kept in the output; remove or replace them before aks-flex-node can load it):")
		for _, r := range m.Refused {
			fmt.Fprintln(w, "  "+r.Error())
		}
	}
	if len(m.Problems) > 0 {
		fmt.Fprintln(w, "the result does not load yet:")
		for _, p := range m.Problems {
			fmt.Fprintln(w, "  "+p)
		}
	}
	if m.Valid() {
		fmt.Fprintf(w, "the result is valid; written to %s\n", dest)
	} else {
		fmt.Fprintf(w, "written to %s; it is not valid yet\n", dest)
	}
}
