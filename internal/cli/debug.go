package cli

import (
	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/diag"
)

func newDebugCommand() *cobra.Command {
	var path, output string
	cmd := &cobra.Command{
		Use:   "debug",
		Short: "Diagnose a joined node, read-only: each check [OK], [WARNING] or [ERROR] with a remedy",
		Long: `Look at a joined node the way the cluster and the kubelet see it, and say
what is wrong and what to do, kubeadm-preflight style. Changes nothing.

  joined              start finished here: its marker and applied state
  api-server          the API server answers the node's own credential (the
                      kubelet's kubeconfig and client certificate in the
                      machine) and says it is system:node:<name>
  client-certificate  the kubelet's client certificate: valid now, this
                      node's subject, rotated before it expires
  clock-skew          this host's clock against the API server's Date header
  machine             systemd-nspawn@<machine>.service active; its restarts
  containerd, kubelet their units in the machine active; their restarts
  node-conditions     the Node as the cluster sees it: Ready, pressure,
                      its lease, taints it did not register with, cordon
  cni                 the CNI config containerd loads, and a route for the
                      pod CIDR in the machine's network namespace
  disk-pressure       the kubelet's and the images' filesystems against the
                      kubelet's eviction and image GC thresholds
  agent               aks-flex-node-agent.service, its /healthz (last pass
                      and last error of each loop), an upgrade in flight

On a host that has not joined only the first check runs. Exit code 0 when no
check found an error (warnings included), 1 otherwise. "debug bundle" collects
this report with logs and configs for a support case.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			l, err := config.LookupLayout("/", path, logger(cmd.ErrOrStderr(), 0))
			if err != nil {
				return invalid(err)
			}
			rep := diag.Run(cmd.Context(), &diag.Env{Layout: l})
			if output == "json" {
				err = writeJSON(cmd.OutOrStdout(), rep)
			} else {
				err = rep.WriteText(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			if rep.Failed() {
				return &exitError{code: ExitFailure, err: errSilent}
			}
			return nil
		},
	}
	addConfigFlag(cmd, &path)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
