package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
)

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, git commit and build time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			info := buildinfo.Get()
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), info)
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "aks-flex-node %s (commit %s, built %s)\n", info.Version, info.GitCommit, info.BuildTime)
			return err
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
