package cli

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/diag"
	"github.com/Azure/aks-flex-node/internal/supportbundle"
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
  aks-machine         the AKS Machine registered (by start or the agent's
                      retry), the goal the agent follows: its last
                      decision, applied eTag and last error
  rollout             the rollout that selects the node, from the agent's
                      record (rollout.json): its phase, step and slot; a
                      failed node (it keeps its slot), an active machine
                      that does not run the release it records, two
                      cluster goals start would refuse, or a record that
                      cannot be read are warnings

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
			// The config only says how the node signs in (see
			// diag.Env.Config); debug diagnoses without it too.
			c, _ := config.Load(path)
			rep := diag.Run(cmd.Context(), &diag.Env{Layout: l, Config: c})
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
	cmd.AddCommand(newDebugBundleCommand())
	return cmd
}

func newDebugBundleCommand() *cobra.Command {
	var path, output string
	var since time.Duration
	var maxMiB int64
	cmd := &cobra.Command{
		Use:   "bundle",
		Short: "Collect logs, configs and reports into a tar.gz for a support case, secrets redacted",
		Long: `Write one tar.gz (0600) with what a support case needs from this host:

  reports/   version, status, debug (JSON and text), preflight and host
             inspect (JSON)
  agent/     the agent's /healthz and /metrics
  host/      the config, os-release, mounts, memory, addresses, routes,
             policy rules, nftables and iptables rulesets, failed units
  units/     every unit and file the agent renders on the host
  state/     the applied state, install tracker, upgrade records, metrics
             store, image records and staged bundle manifests
  machines/  the node's units and configs in each machine (containerd,
             kubelet, CNI, kubeconfigs) read inside the machine's root
  logs/      the agent's log files, and the journals of the agent's units
             and each machine's containerd, kubelet and boot, since --since,
             each cut to its last 8 MiB
  manifest.json  what the bundle holds, where each member came from, how
             many secrets were redacted in it, and what could not be
             collected and why

Secrets are redacted in every member: private keys, bootstrap token secrets,
bearer tokens and JWTs, the value of every key naming a token, secret,
password or key data, and the config's own secrets wherever they appear. The
members' total is capped (--max-mib): logs are cut first. On a host that has
not joined it collects what there is and says what is missing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := config.LookupLayout("/", path, logger(cmd.ErrOrStderr(), slog.LevelWarn))
			if err != nil {
				return invalid(err)
			}
			if output == "" {
				host, _ := os.Hostname()
				output = fmt.Sprintf("aks-flex-node-bundle-%s-%s.tar.gz", host, time.Now().UTC().Format("20060102T150405Z"))
			}
			res, err := supportbundle.Collect(cmd.Context(), supportbundle.Options{
				Layout: l, Output: output, MaxBytes: maxMiB << 20, Since: since,
				Preflight: preflightReport(path), HostInspect: inspectHost,
			})
			if err != nil {
				return fmt.Errorf("debug bundle: %w", err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), res.Summary())
			return err
		},
	}
	addConfigFlag(cmd, &path)
	cmd.Flags().StringVarP(&output, "output", "o", "", "the bundle to write (default aks-flex-node-bundle-<host>-<time>.tar.gz here)")
	cmd.Flags().DurationVar(&since, "since", supportbundle.DefaultSince, "how far back the journals go")
	cmd.Flags().Int64Var(&maxMiB, "max-mib", supportbundle.DefaultMaxBytes>>20, "cap of the members' total size before compression, in MiB")
	return cmd
}
