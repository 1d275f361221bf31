package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/drain"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/preflight"
	"github.com/Azure/aks-flex-node/internal/progress"
	"github.com/Azure/aks-flex-node/internal/state"
)

// startLong is start's --help text; the phase list comes from the code.
func startLong() string {
	return `Join this host to the cluster as a worker node: run the preflight checks
and refuse on any error before touching the host; prepare the host (kernel
modules, sysctls, swap off, layout dirs); provision the machine kube1 from
bootstrap.ociImage; install the node components from the offline bundle or
upstream, verified; write the machine's nspawn files, containerd, kubelet and
CNI config; start it; wait for the kubelet's TLS bootstrap (with a bootstrap
token; with an Azure identity the kubelet signs in through the credential
plugin, token kubelogin) and for the Node to be Ready; save the applied state
and start aks-flex-node-agent.service.

A second start on a converged host changes nothing and says so.

On a joined node whose config names another Kubernetes version
(components.kubernetes) or worker image (bootstrap.ociImage, or a reference
that now resolves to another digest) than the active machine runs, start
does not install into the running machine: it repaves the node onto the
other machine (kube1 <-> kube2) as "node upgrade" does, with the same phases
and tasks (see "aks-flex-node node upgrade --help"): the new machine
prepared while the old one serves, cordon and drain (bounded by
--drain-timeout), the switch with the node's identity handed over, Ready at
the new version within --join-timeout or a rollback to the old machine.
Preflight is start's, judging the new machine's bundle and worker image;
node-version is then the new kubelet's version skew against the API server.
Afterwards the config is the truth: the next start changes nothing.

The cluster's goal wins over the config file for the fields it sets. On a
node a FlexNodeRollout moved (the agent records the release in rollout.json
in the state dir), start runs the release's components.kubernetes,
bootstrap.ociImage and bootstrap.offlineArtifacts.source, not the file's
older values: it converges to the release and never repaves back. On a node
whose config names an AKS Machine (azure.targetCluster.resourceId), the
settings the agent applied from the Machine (machine-goal.json in the state
dir: components.kubernetes, node.labels, node.taints, node.maxPods and the
kubelet's image GC thresholds) win the same way. The order is config file <
AKS Machine goal < rollout release; start prints one line per key the
cluster set, with its source and the file's value, e.g.
"components.kubernetes 1.35.4 from rollout r1 generation 2 (the config file
says 1.34.2)", and preflight checks that config. A node managed through ARM
never takes part in a rollout: when both records apply, start refuses and
names both files (remove azure.targetCluster.resourceId to keep the
rollout's release, or rollout.json to follow the Machine). A record that
cannot be read, or a goal that would make the config invalid (cluster data
is validated like the file), refuses the start too, naming the file or the
key and its source, and what to do. Both records are read under the node
lock, so a release the agent is switching to is seen.

On a terminal, start shows each task as it runs, with its elapsed time and
what a long wait (the TLS bootstrap, the Node turning Ready) waits for, each
task's outcome, and a summary line (tasks, how many changed, total time);
only warnings and errors are logged there. Under systemd, in a pipe or a
file the output is the plain lines below, unchanged.

start holds the node lock (node.lock in the state dir) from preflight to the
end: a start, reset or agent-upgrade already running makes it wait, up to
--lock-timeout, saying which command (and pid) holds the lock.

Phases, in order, and their tasks (each task logs one line,
task=<name> status=ok changed=<bool>, and each phase one, phase=<name>):

` + lifecycle.DescribeStart() + `
--ignore-preflight-errors=all does not cover agent-binary: ignoring it only
moves the failure after the node joined; name it to ignore it anyway.`
}

// goalConfig is config c (laid out as l) with the cluster's goal over it,
// the config start runs (lifecycle.LoadGoal), each key the goal set told
// to w as a "[label] ..." line: preflight checks what start will run.
func goalConfig(c *config.Config, l layout.Layout, label string, w io.Writer) (*config.Config, error) {
	g, err := lifecycle.LoadGoal(l, c)
	if err != nil {
		return nil, fmt.Errorf("the cluster's goal: %w", err)
	}
	for _, s := range g.Sources {
		fmt.Fprintf(w, "[%s] %s\n", label, s)
	}
	return g.Config, nil
}

func newStartCommand() *cobra.Command {
	var path string
	var opts preflight.Options
	var timeout, drainTimeout, lockTimeout time.Duration
	var drainRules drain.Options
	cmd := &cobra.Command{
		Use:     "start",
		Aliases: []string{"bootstrap"},
		Short:   "Join this host to the cluster (runs preflight first; idempotent)",
		Long:    startLong(),
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Validate(preflight.StartNames); err != nil {
				return invalid(err)
			}
			data, err := config.ReadFile(path)
			var ie *config.InvalidError
			// One line, which also says the host is untouched.
			if errors.As(err, &ie) {
				return invalid(fmt.Errorf("start: %w; nothing was changed", err))
			}
			if err != nil {
				return fmt.Errorf("start: config: %w", err)
			}
			c, err := config.Parse(path, data)
			if err != nil {
				return invalid(fmt.Errorf("start: %w; nothing was changed", err))
			}
			printNotes(cmd.ErrOrStderr(), path, c)
			l, err := c.Layout("/", path)
			if err != nil {
				return invalid(err)
			}
			con := progress.NewConsole("start", cmd.OutOrStdout(), cmd.ErrOrStderr(), levelOf(c), false)
			s := lifecycle.NewStart(lifecycle.Options{
				Layout: l, Config: c, ConfigFile: path, ConfigData: data,
				// After a repave the node runs in the other machine:
				// start converges that one.
				Machine:      state.Open(l).ActiveMachine(),
				Log:          con.Log,
				Progress:     con.Progress,
				Observer:     con.Observer,
				JoinTimeout:  timeout,
				DrainTimeout: drainTimeout,
				Drain:        drainRules,
				Lock:         lockWait(cmd, l, lockTimeout),
			})
			pf := lifecycle.Preflight{
				Env:     preflightEnv(c, path, l),
				Options: opts,
				Report:  con.Progress,
			}
			_, err = s.Run(cmd.Context(), pf)
			con.Finish(err)
			var refused *lifecycle.RefusedError
			if errors.As(err, &refused) {
				fmt.Fprintln(cmd.ErrOrStderr(), "aks-flex-node: start: refused before touching the host; nothing was changed")
			}
			if err != nil {
				return fmt.Errorf("start: %w", err)
			}
			return nil
		},
	}
	addConfigFlag(cmd, &path)
	preflight.AddFlags(cmd.Flags(), &opts)
	cmd.Flags().DurationVar(&timeout, "join-timeout", 5*time.Minute, "how long to wait for the TLS bootstrap and for the Node to be Ready (on a repave: at the new version, before rolling back)")
	cmd.Flags().DurationVar(&drainTimeout, "drain-timeout", 5*time.Minute, "when start repaves (the config names another version or worker image): how long the drain may take before the repave gives up (and uncordons)")
	addDrainFlags(cmd.Flags(), &drainRules)
	addLockFlag(cmd, &lockTimeout)
	return cmd
}

func newResetCommand() *cobra.Command {
	var path string
	var keepCache bool
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:     "reset",
		Aliases: []string{"unbootstrap"},
		Short:   "Undo start: stop and remove the machine, agent units, state and logs (keeps the binary)",
		Long: `Stop kubelet, containerd and the machine; remove the machine and its nspawn
files, the agent units (and the recovery unit and timer), the applied state,
the staged bundles and the logs; everything start created is tracked, so
exactly that is removed. The agent binary stays, with its upgrade slots,
links and recovery script (uninstall.sh removes them). Safe to run twice and
after a half-finished start. The layout comes from --config; an absent config
selects the default layout. reset holds the node lock, as start does.

The worker image's unpacked layers (the layer cache machines are made from)
are removed too, unless --keep-image-cache: then the next start makes the
machine from them in under a second. The flag also keeps the staged bundles
(pulled from a registry or downloaded) and the bundles' verification
records: the next start checks the registry's digest against the staged one
and each file's stat against its record, and pulls and hashes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger(cmd.ErrOrStderr(), 0)
			l, err := config.LookupLayout("/", path, log)
			if err != nil {
				var ie *config.InvalidError
				if errors.As(err, &ie) {
					return invalid(err)
				}
				return err
			}
			con := progress.NewConsole("reset", cmd.OutOrStdout(), cmd.ErrOrStderr(), 0, false)
			changed, err := lifecycle.Reset(cmd.Context(), lifecycle.Options{Layout: l, ConfigFile: path, Log: con.Log, Observer: con.Observer, Lock: lockWait(cmd, l, lockTimeout), KeepImageCache: keepCache})
			con.Finish(err)
			if err != nil {
				return fmt.Errorf("reset: %w", err)
			}
			if !con.Display() {
				fmt.Fprintf(cmd.OutOrStdout(), "[reset] done (changed=%t)\n", changed)
			}
			return nil
		},
	}
	addConfigFlag(cmd, &path)
	cmd.Flags().BoolVar(&keepCache, "keep-image-cache", false, "keep the worker image's unpacked layers and the staged bundles for the next start")
	addLockFlag(cmd, &lockTimeout)
	return cmd
}
