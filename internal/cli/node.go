package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/drain"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/preflight"
	"github.com/Azure/aks-flex-node/internal/progress"
	"github.com/Azure/aks-flex-node/internal/state"
)

func newNodeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Change the joined node: upgrade Kubernetes by a blue/green repave",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newNodeUpgradeCommand())
	return cmd
}

type nodeUpgradeFlags struct {
	path, version, image, output string
	drain, ready, lock           time.Duration
	preflight                    preflight.Options
	drainRules                   drain.Options
}

func newNodeUpgradeCommand() *cobra.Command {
	var f nodeUpgradeFlags
	cmd := &cobra.Command{
		Use:   "upgrade --kubernetes-version V",
		Short: "Repave the node onto the other machine (kube1 <-> kube2) at Kubernetes V, with drain and rollback",
		Long: `Upgrade (or change) the node's Kubernetes version by a blue/green repave: the
machine that does not serve (kube2 when kube1 is active, and back) is
prepared completely with version V (and --image, if given, as its worker
image) while the active one keeps serving: rootfs, node components from the
bundle for V (bootstrap.offlineArtifacts.source with V), nspawn files and
node config. Then the Node is cordoned and drained through the Eviction API
by kubectl drain's rules (PodDisruptionBudgets respected, mirror pods left,
bounded by --drain-timeout; the pods left are named when it passes, and the
node is uncordoned unless it was cordoned before). As kubectl drain does,
the drain refuses, before evicting anything and naming each pod, a
DaemonSet's pods (--ignore-daemonsets leaves them), pods no controller
manages (--force evicts them, for good) and pods with emptyDir data
(--delete-emptydir-data evicts them, their data with them). Then the
active machine stops and hands the node's identity over
(the kubelet's client certificate and key, its kubeconfig: the same Node,
never a new one), the other machine starts, and the Node must be Ready at
kubelet V within --ready-timeout; then it is uncordoned and the state
records the new active machine.

Rollback: when the new machine is not Ready in time, it is stopped (and kept
on disk for inspection until the next repave), the old machine starts again
and must be Ready, the Node is uncordoned, and the reason is recorded:
status shows it. The exit code is 1 then.

Preflight runs first, before anything changes: the bundle for V is there
and verifies, the worker image resolves, and kubelet V is not newer than the
API server and at most 3 minor versions older (version-skew).

The config file is not changed: components.kubernetes there still names the
version the node joined with; the state (status) says what each machine
runs. The config is start's truth, though: a start with that config repaves
the node back to the version (and worker image) it names. Set
components.kubernetes (and bootstrap.ociImage) to what node upgrade moved
the node to, or change the config and run start instead of node upgrade.
node upgrade holds the node lock, as start does.

Each repave's end is an Event on the Node (Repaved with both machines and
versions and the duration; RolledBack or RepaveFailed with the reason) and
a sample of aks_flex_node_repave_duration_seconds by result.

Crash safety: a node upgrade killed, or a host that lost power, at any step
is finished by the agent (finish-repave) or by the next node upgrade, before
it repaves: the side the applied state names (the new one once save-state
ran, the old one before) runs alone, the other stopped first; the Node is
uncordoned if that repave cordoned it; status shows it as interrupted.

Phases, in order, and their tasks (each task logs one line,
task=<name> status=ok changed=<bool>; rollback runs only on a failure in
switch):

` + lifecycle.DescribeRepave(),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runNodeUpgrade(cmd, &f) },
	}
	addConfigFlag(cmd, &f.path)
	fl := cmd.Flags()
	fl.StringVar(&f.version, "kubernetes-version", "", "the Kubernetes version the node is repaved to (required)")
	fl.StringVar(&f.image, "image", "", "the worker image for the new machine (default: bootstrap.ociImage or the bundle's)")
	fl.DurationVar(&f.drain, "drain-timeout", 5*time.Minute, "how long the drain may take before the repave gives up (and uncordons)")
	addDrainFlags(fl, &f.drainRules)
	fl.DurationVar(&f.ready, "ready-timeout", 3*time.Minute, "how long the new machine has to be Ready at the new version before the repave rolls back")
	fl.StringVarP(&f.output, "output", "o", "text", "output format: text or json (the repave's record)")
	fl.StringSliceVar(&f.preflight.IgnoreErrors, "ignore-preflight-errors", nil, "preflight checks whose errors are shown as warnings, comma-separated, or 'all'")
	fl.BoolVar(&f.preflight.FailOnWarnings, "fail-on-warnings", false, "treat preflight warnings as fatal")
	addLockFlag(cmd, &f.lock)
	return cmd
}

func runNodeUpgrade(cmd *cobra.Command, f *nodeUpgradeFlags) error {
	if err := checkOutput(f.output); err != nil {
		return err
	}
	if f.version == "" {
		return invalidf("node upgrade: --kubernetes-version is required")
	}
	if err := f.preflight.Validate(preflight.RepaveNames); err != nil {
		return invalid(err)
	}
	data, err := config.ReadFile(f.path)
	if err != nil {
		return invalid(fmt.Errorf("node upgrade: %w; nothing was changed", err))
	}
	c, err := config.Parse(f.path, data)
	if err != nil {
		return invalid(fmt.Errorf("node upgrade: %w; nothing was changed", err))
	}
	l, err := c.Layout("/", f.path)
	if err != nil {
		return invalid(err)
	}
	applied, err := state.Open(l).Applied()
	if err != nil {
		return fmt.Errorf("node upgrade: %w", err)
	}
	if applied == nil {
		return fmt.Errorf("node upgrade: this host has not joined (no %s/%s): run start first", l.StateDir(), state.AppliedFile)
	}
	stdout := cmd.OutOrStdout()
	if f.output == "json" {
		stdout = cmd.ErrOrStderr() // stdout is the record's
	}
	// The other side starts from what the node runs by the cluster's goal
	// (a rollout's worker image, say), not the file's older values; the
	// flags then change what they name.
	if c, err = goalConfig(c, l, "node upgrade", stdout); err != nil {
		return fmt.Errorf("node upgrade: %w; nothing was changed", err)
	}
	con := progress.NewConsole("node upgrade", stdout, cmd.ErrOrStderr(), levelOf(c), false)
	r := lifecycle.NewRepave(lifecycle.RepaveOptions{
		Options: lifecycle.Options{Layout: l, Config: c, ConfigFile: f.path, ConfigData: data,
			Log: con.Log, Progress: con.Progress, Observer: con.Observer, Lock: lockWait(cmd, l, f.lock), Drain: f.drainRules},
		KubernetesVersion: f.version, Image: f.image, DrainTimeout: f.drain, ReadyTimeout: f.ready,
	}, *applied)
	pf := lifecycle.Preflight{
		Env:     preflightEnv(c, f.path, l),
		Options: f.preflight,
		Report:  con.Progress,
	}
	rec, err := r.Run(cmd.Context(), pf)
	con.Finish(err)
	var refused *lifecycle.RefusedError
	if errors.As(err, &refused) {
		fmt.Fprintln(cmd.ErrOrStderr(), "aks-flex-node: node upgrade: refused before anything changed")
	}
	if f.output == "json" && rec != nil {
		if jerr := writeJSON(cmd.OutOrStdout(), rec); jerr != nil && err == nil {
			err = jerr
		}
	}
	if err != nil {
		return fmt.Errorf("node upgrade: %w", err)
	}
	return nil
}

// addDrainFlags adds kubectl drain's opt-ins, by its flags' names, for the
// commands whose repave drains the node (node upgrade, start).
func addDrainFlags(fl *pflag.FlagSet, o *drain.Options) {
	fl.BoolVar(&o.IgnoreDaemonSets, "ignore-daemonsets", false, "drain: leave DaemonSet-managed pods (without it they refuse the drain)")
	fl.BoolVar(&o.Force, "force", false, "drain: evict pods no controller manages; nothing recreates them (without it they refuse the drain)")
	fl.BoolVar(&o.DeleteEmptyDirData, "delete-emptydir-data", false, "drain: evict pods with emptyDir volumes, deleting their data (without it they refuse the drain)")
}
