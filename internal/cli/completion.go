package cli

import (
	"io"

	"github.com/spf13/cobra"
)

func newCompletionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "completion",
		Short: "Print a shell completion script for bash, zsh or fish",
		Long: `Print the completion script for a shell. Commands, subcommands and flags
complete; the script asks this binary (aks-flex-node __complete), so it
never falls behind it.

  bash  source <(aks-flex-node completion bash)
        or: aks-flex-node completion bash > /etc/bash_completion.d/aks-flex-node
  zsh   aks-flex-node completion zsh > "${fpath[1]}/_aks-flex-node"
  fish  aks-flex-node completion fish > ~/.config/fish/completions/aks-flex-node.fish`,
	}
	for _, sh := range []struct {
		name string
		gen  func(root *cobra.Command, w io.Writer) error
	}{
		{"bash", func(root *cobra.Command, w io.Writer) error { return root.GenBashCompletionV2(w, true) }},
		{"zsh", func(root *cobra.Command, w io.Writer) error { return root.GenZshCompletion(w) }},
		{"fish", func(root *cobra.Command, w io.Writer) error { return root.GenFishCompletion(w, true) }},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   sh.name,
			Short: "Print the " + sh.name + " completion script",
			Args:  cobra.NoArgs,
			RunE: func(c *cobra.Command, _ []string) error {
				return sh.gen(c.Root(), c.OutOrStdout())
			},
		})
	}
	return cmd
}
