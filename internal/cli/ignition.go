package cli

import (
	"encoding/base64"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/ignition"
)

// Azure's caps: customData holds at most 65535 bytes once decoded; userData
// at most 64 KiB of base64 text, so about 48 KiB of config.
const (
	azureCustomDataLimit = 65535
	azureUserDataLimit   = 64 * 1024
)

// sizeWarning says which of Azure's limits a rendered config of n bytes
// exceeds, or "" when it fits both.
func sizeWarning(n int) string {
	b64 := base64.StdEncoding.EncodedLen(n)
	switch {
	case n > azureCustomDataLimit:
		return fmt.Sprintf("the config is %d bytes, over Azure's %d-byte customData limit (and userData's %d bytes of base64: it would be %d)", n, azureCustomDataLimit, azureUserDataLimit, b64)
	case b64 > azureUserDataLimit:
		return fmt.Sprintf("the config is %d bytes, %d as base64: it fits customData (%d bytes) but not userData (%d bytes of base64)", n, b64, azureCustomDataLimit, azureUserDataLimit)
	}
	return ""
}

func newIgnitionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ignition",
		Short: "Render and check Ignition configs that provision hosts with no one logged in",
	}
	cmd.AddCommand(newIgnitionRenderCommand(), newIgnitionCheckCommand())
	return cmd
}

func newIgnitionRenderCommand() *cobra.Command {
	var path, binURL, binSHA, binPath, spec, target, output string
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Render an Ignition config that installs the agent and joins the host on first boot",
		Long: `Render an Ignition config (built with Ignition's own config types and checked
with its validator) that, on the host's first boot:

  - writes the agent config to /etc/aks-flex-node/config.json (mode 0600, root);
  - places the agent binary at the layout's agentBinary
    (<agent.hostPrefix>/bin/aks-flex-node), downloaded from --binary-url and
    verified against --binary-sha256, or embedded from --binary (gzip, in a
    data URL, its SHA-256 verified by Ignition);
  - installs and enables aks-flex-node-firstboot.service, which runs
    "aks-flex-node start --config /etc/aks-flex-node/config.json" once,
    after network-online.target, unless /var/lib/aks-flex-node/joined exists
    (start writes it when the node is Ready; reset removes it).

For --target acl (the default) the config must set agent.hostPrefix and no
path of the layout may be under /usr, which is read-only there: nothing is
written under /usr. --target generic allows the classic /usr/local layout.

The rendered config embeds the agent config and its secrets. --output FILE is
written with mode 0600; "-" (the default) writes to stdout. Either way a
warning reminds you that customData and userData are readable by anyone with
access to the VM's metadata.

--spec 3.3.0 (default) is accepted by every Ignition from 2.14 on; 3.4.0
needs Ignition 2.15 or newer.

Exit status: 0 rendered, 1 the output could not be written, 2 invalid input.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadConfig(path, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			// After loadConfig: it refuses a file too large to be a
			// config before anything reads all of it.
			data, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("ignition render: read config: %w", err)
			}
			o := ignition.Options{Spec: spec, Target: target, Config: c, ConfigData: data, ConfigFile: path,
				BinaryURL: binURL, BinarySHA256: binSHA}
			if binPath != "" {
				if o.Binary, err = os.ReadFile(binPath); err != nil {
					return fmt.Errorf("ignition render: --binary: %w", err)
				}
			}
			r, err := ignition.Render(o)
			if err != nil {
				if ignition.IsInputError(err) {
					return invalid(fmt.Errorf("ignition render: %w", err))
				}
				return fmt.Errorf("ignition render: %w", err)
			}
			errw := cmd.ErrOrStderr()
			fmt.Fprintln(errw, "warning: the rendered config embeds the agent config and its secrets (bootstrap token, credentials); customData and userData are readable by anyone with access to the VM's metadata")
			if w := sizeWarning(len(r.JSON) + 1); w != "" {
				fmt.Fprintf(errw, "warning: %s; host it (for example in blob storage) and pass a small config that points at it with ignition.config.replace and its verification.hash, or use --binary-url\n", w)
			}
			if output == "-" {
				if _, err := cmd.OutOrStdout().Write(append(r.JSON, '\n')); err != nil {
					return fmt.Errorf("ignition render: %w", err)
				}
			} else if _, err := fsutil.WriteFile(output, append(r.JSON, '\n'), 0o600); err != nil {
				return fmt.Errorf("ignition render: write %s: %w", output, err)
			}
			dest := output
			if dest == "-" {
				dest = "stdout"
			}
			fmt.Fprintf(errw, "rendered Ignition %s (%d bytes) to %s: %s (0600), %s (0755), %s enabled, runs once until %s exists\n",
				r.Spec, len(r.JSON), dest, r.Layout.ConfigFile(), r.Layout.AgentBinary(), r.Layout.FirstBootUnit(), r.Layout.JoinedMarker())
			return nil
		},
	}
	addConfigFlag(cmd, &path)
	f := cmd.Flags()
	f.StringVar(&binURL, "binary-url", "", "http(s) URL Ignition downloads the agent binary from (needs --binary-sha256)")
	f.StringVar(&binSHA, "binary-sha256", "", "SHA-256 (hex) of the binary at --binary-url; Ignition refuses anything else")
	f.StringVar(&binPath, "binary", "", "agent binary to embed (gzip-compressed data URL)")
	f.StringVar(&spec, "spec", ignition.DefaultSpec, "Ignition config spec version: "+strings.Join(ignition.Specs, " or "))
	f.StringVar(&target, "target", ignition.TargetACL, "host kind: acl (read-only /usr: refuses any path under /usr) or generic")
	f.StringVarP(&output, "output", "o", "-", `file to write (mode 0600), or "-" for stdout`)
	return cmd
}

func newIgnitionCheckCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "check FILE",
		Short: "Validate an Ignition config and print the report with JSON paths",
		Long: `Validate an Ignition config (spec 3.x) with Ignition's own parser and
validator and print every finding with its JSON path ($.storage.files.0.path).
A config that installs aks-flex-node with paths under /usr (read-only on
Azure Container Linux) is an error naming the path. FILE may be the raw
config, or base64 and/or gzip of it as Azure customData holds it.

Exit status: 0 valid (warnings allowed), 1 FILE unreadable, 2 invalid or
not an Ignition config.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			file := args[0]
			raw, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("ignition check: %w", err)
			}
			p := ignition.Classify(file, raw)
			if p.Kind != ignition.KindIgnition {
				return invalidf("ignition check: %s is not an Ignition config: it is %s", file, p.Describe())
			}
			res := ignition.CheckPayload(p)
			if output == "json" {
				err = writeJSON(cmd.OutOrStdout(), res)
			} else {
				if p.Encoding != "raw" {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %s-encoded\n", file, p.Encoding)
				}
				err = res.WriteText(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			if !res.Valid {
				return &exitError{code: ExitInvalid, err: errSilent}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
