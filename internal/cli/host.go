package cli

import (
	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/hostos"
)

func newHostCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Inspect the host this agent runs on",
	}
	var root, output string
	inspect := &cobra.Command{
		Use:   "inspect",
		Short: "Report the OS family and host capabilities, each as probed",
		Long: `Report what the host is and can do: os-release fields, distro family
(acl, flatcar, azurelinux, ubuntu, debian, rhel, fedora-coreos, unknown),
whether /usr is read-only (from the mount table), the package manager,
SELinux mode, systemd and systemd-nspawn.

With --root, os-release and files are read under that directory; probes that
need the running host (mount table, PID 1, systemctl) are skipped and say so
in "notes".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			r, err := hostos.Inspect(cmd.Context(), root)
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), r)
			}
			return r.WriteText(cmd.OutOrStdout())
		},
	}
	inspect.Flags().StringVar(&root, "root", "/", "root directory of the host tree to inspect")
	inspect.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.AddCommand(inspect)
	return cmd
}
