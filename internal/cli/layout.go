package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/layout"
)

func newLayoutCommand() *cobra.Command {
	var path, root, output, get, prefix, binDir string
	cmd := &cobra.Command{
		Use:   "layout",
		Short: "Print where agent-owned files live for a config or a prefix",
		Long: `Print the resolved layout: every agent-owned host path derived from
agent.hostPrefix. With --config the prefix comes from the config file; without
it, from --prefix (validated by the same rule; empty selects /usr/local).
--config is a host path; with --root it is read under that root.

--get KEY prints one bare value (for scripts), e.g. --get binDir.
--check-bin-dir DIR exits 0 when DIR is a bin dir of some valid layout
(/usr/local/bin or <prefix>/bin) and prints the prefix it implies.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cmd.Flags().Changed("check-bin-dir") {
				p, err := layout.IsBinDir(binDir)
				if err != nil {
					return invalid(err)
				}
				fmt.Fprintln(out, p)
				return nil
			}
			if cmd.Flags().Changed("config") && cmd.Flags().Changed("prefix") {
				return invalidf("--config and --prefix are mutually exclusive")
			}
			var l layout.Layout
			if cmd.Flags().Changed("config") {
				c, err := loadConfig(mapConfigPath(root, path), cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				if l, err = c.Layout(root, path); err != nil {
					return invalid(err)
				}
			} else {
				var err error
				if l, err = layout.New(root, prefix, ""); err != nil {
					return invalidf("--prefix: %w", err)
				}
			}
			if get != "" {
				v, err := l.Get(get)
				if err != nil {
					return invalid(err)
				}
				_, err = fmt.Fprintln(out, v)
				return err
			}
			if output == "json" {
				return writeJSON(out, l)
			}
			keys := l.Keys()
			for _, k := range layout.KeyOrder {
				v := keys[k]
				if v == "" {
					v = `""`
				}
				fmt.Fprintf(out, "%-22s %s\n", k+":", v)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", layout.ConfigFile, "config file to read agent.hostPrefix from")
	cmd.Flags().StringVar(&prefix, "prefix", "", "install prefix to resolve when --config is not given")
	cmd.Flags().StringVar(&root, "root", "/", "root directory the host's / is mounted at")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.Flags().StringVar(&get, "get", "", "print one value by key (e.g. binDir, libDir, agentBinary)")
	cmd.Flags().StringVar(&binDir, "check-bin-dir", "", "check that DIR is a layout bin dir and print its prefix")
	return cmd
}
