package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/hostos"
	"github.com/Azure/aks-flex-node/internal/ignition"
)

func newHostCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Inspect the host this agent runs on",
	}
	var root, output, customData, imds string
	var summary bool
	inspect := &cobra.Command{
		Use:   "inspect",
		Short: "Report the OS family and host capabilities, each as probed",
		Long: `Report what the host is and can do: os-release fields, distro family
(acl, flatcar, azurelinux, ubuntu, debian, rhel, fedora-coreos, unknown),
whether /usr is read-only (from the mount table), the package manager,
SELinux mode, systemd and systemd-nspawn.

With --root, os-release and files are read under that directory; probes that
need the running host (mount table, PID 1, systemctl) are skipped and say so
in "notes".

It also reports the provisioning payloads the host received: Azure customData
(--custom-data, default /var/lib/waagent/CustomData, under --root) and the
IMDS userData (--imds-endpoint, default http://169.254.169.254, asked only
on an Azure VM, which its SMBIOS chassis asset tag tells; "off" skips it;
not asked with --root). Each is named: Ignition config (with its spec
version), shell script, cloud-config, MIME multipart, through base64 and gzip.
An Ignition config on a host that does not run Ignition (not ACL, Flatcar or
Fedora CoreOS) is an ERROR naming the file and spec; so is, on ACL, a config
that installs aks-flex-node under /usr, naming the path. The command still
exits 0: it reports; preflight is what fails on these errors.

Environment: AKS_FLEX_NODE_CUSTOM_DATA and AKS_FLEX_NODE_IMDS_ENDPOINT set
the defaults of --custom-data and --imds-endpoint.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			r, err := hostos.Inspect(cmd.Context(), root)
			if err != nil {
				return err
			}
			if summary {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), r.Summary())
				return err
			}
			src := ignition.SourcesFromEnv(root)
			if cmd.Flags().Changed("custom-data") {
				src.CustomData = customData
			}
			if cmd.Flags().Changed("imds-endpoint") {
				src.AskIMDS(imds)
			}
			prov := ignition.Inspect(cmd.Context(), src, r.Family)
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), hostInspectJSON{r, prov})
			}
			if err := r.WriteText(cmd.OutOrStdout()); err != nil {
				return err
			}
			return prov.WriteText(cmd.OutOrStdout())
		},
	}
	inspect.Flags().StringVar(&customData, "custom-data", ignition.DefaultCustomDataPath, "host path of the Azure customData file (read under --root)")
	inspect.Flags().StringVar(&imds, "imds-endpoint", ignition.DefaultIMDSEndpoint, `IMDS base URL for the VM's userData, or "off" (default: asked only on an Azure VM, told by its SMBIOS chassis asset tag)`)
	inspect.Flags().StringVar(&root, "root", "/", "root directory of the host tree to inspect")
	inspect.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	inspect.Flags().BoolVar(&summary, "summary", false, "print one summary line, e.g. \"Azure Container Linux 3.0 (read-only /usr, no package manager)\"")
	cmd.AddCommand(inspect, newHostCheckDirCommand())
	return cmd
}

func newHostCheckDirCommand() *cobra.Command {
	var root string
	var needExec bool
	cmd := &cobra.Command{
		Use:   "check-dir DIR",
		Short: "Exit 0 when DIR exists or can be created and written (never creates anything)",
		Long: `Check that DIR, or the nearest existing ancestor a "mkdir -p DIR" would
write into, is writable and not on a read-only mount. With --exec also require
that its mount is not noexec. Exit 1 with the reason (naming the mount) when it
is not. Used by install.sh, which asks the binary instead of guessing.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := &hostos.Prober{Root: root}
			dir := args[0]
			anc, err := p.NearestExistingAncestor(dir)
			if err != nil {
				return err
			}
			c, err := p.CheckDir(anc)
			if err != nil {
				return err
			}
			if !c.Writable {
				return fmt.Errorf("%s cannot be written: %s", dir, c.Reason)
			}
			if needExec && c.Mount != nil && c.Mount.NoExec() {
				return fmt.Errorf("%s cannot hold executables: %s is on mount %s with noexec", dir, anc, c.Mount.MountPoint)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: writable (nearest existing directory %s)\n", dir, anc)
			return err
		},
	}
	cmd.Flags().StringVar(&root, "root", "/", "root directory of the host tree")
	cmd.Flags().BoolVar(&needExec, "exec", false, "also require a mount that allows executables")
	return cmd
}

// hostInspectJSON is what `host inspect --output json` prints, and what
// a support bundle holds as host-inspect.json.
type hostInspectJSON struct {
	*hostos.Report
	Provisioning ignition.Provisioning `json:"provisioning"`
}

// inspectHost is `host inspect --output json` of the running host with
// the default provisioning sources.
func inspectHost(ctx context.Context) (any, error) {
	r, err := hostos.Inspect(ctx, "/")
	if err != nil {
		return nil, err
	}
	return hostInspectJSON{r, ignition.Inspect(ctx, ignition.SourcesFromEnv("/"), r.Family)}, nil
}
