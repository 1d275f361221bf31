package cli

import (
	"errors"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/daemon"
	"github.com/Azure/aks-flex-node/internal/failpoint"
	"github.com/Azure/aks-flex-node/internal/logfile"
)

func newAgentCommand() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the long-running agent (started by aks-flex-node-agent.service)",
		Long: `Run the agent in the foreground until SIGTERM. It waits, with backoff,
for the config file and for the API server rather than exiting, so systemd's
start limit is never reached because a cluster is not yet reachable. An
invalid config exits 2, which the unit does not restart.

On a joined host it keeps the node, at its start and every
agent.machineReconcileInterval, under the node lock (skipping a pass while
start, reset or agent-upgrade hold it): the active machine running (after a
reboot nothing else starts it), the files start rendered into it as start
recorded them (an edited or deleted one is restored from the agent's own
rendering and the unit that reads it restarted), containerd and the kubelet
active, the inactive side stopped; this needs no API server. Once the API
server answers, a Node deleted without the deletion taint is registered
again (the kubelet restarted), and a Node carrying
kubernetes.azure.com/flex-node-deleting=true:NoSchedule is drained and the
host reset (the agent stops for good; it never deletes the Node), and a
repave whose node upgrade was killed or lost power is finished: the side
the applied state names runs alone, the Node is uncordoned if that repave
cordoned it, and status shows the repave as interrupted. Each
repair is a log line, a metric, an entry status shows, and an Event
(Repaired, or RepairFailed) on the Node, recorded with the node's own
credential; so is a rollback of an agent upgrade (RolledBack).

With azure.targetCluster.resourceId set, it follows the node's AKS Machine
as its goal (loop follow-machine), every agent.machineReconcileInterval
with 0-10 % jitter, one log line per decision: labels and taints changed
are applied in place (the labels a node may set on its own Node, and the
kubelet's registration settings; AKS sets a registered Node's taints), a
new Kubernetes version, maxPods or image-GC thresholds wait until AKS has
deleted the Node and are then applied by a repave (with its rollback), a
deleted Machine with the Node tainted resets the host, and while ARM fails
nothing changes. A registration start could not make is retried. The
applied eTag, the last decision and error are the Node's FlexNodeMachine
condition, in status, debug and /metrics.

It follows the cluster's FlexNodeRollouts (loop follow-rollout; after
cluster prepare --fleet) through a watch, not a poll: for the oldest
rollout whose nodeSelector selects its Node it stages the release on the
inactive side while the node serves (Staged, or Failed at stage with the
reason, never taking a slot), takes one of maxUnavailable slots unless the
rollout is paused or a node failed in it, cordons, drains (drainTimeout;
DaemonSet pods stay), repaves to the release with its rollback, soaks
(Ready, kubelet and containerd without restarts, the DaemonSets' pods
back, and the ReplicaSets and StatefulSets whose pods the drain evicted
with their ready replicas back, waited for up to 5 minutes after the
switch, for soak), releases the slot and reports Updated. A release's agent
binary is staged into the inactive agent slot and, in the slot, installed
first with the blue/green agent upgrade: the new agent resumes the rollout
(step agent) and switches the node; a new agent that fails is rolled back
by recovery, and the last-good agent reports Failed at agent. A failure
keeps the slot, so the rollout pauses until fleet resume. A slot whose
lease expired goes to another node only when its holder's Node is gone
(deleted, or registered again) or Ready and schedulable (after half a
lease more); a holder cordoned or NotReady (powered off mid-switch) keeps
it until it comes back or its Node is deleted. Each phase is the
Node's FlexNodeRelease condition, an Event (RolloutStaged, ...), a log
line and /metrics, and is kept in the state dir (rollout.json) so a
restarted agent resumes. A node whose AKS Machine is its goal reports
ManagedElsewhere and never takes a slot.

It serves /healthz and /metrics (Prometheus) on the Unix socket
/var/lib/aks-flex-node/agent.sock (root only), and on agent.metricsAddress
when that is set:

  curl --unix-socket /var/lib/aks-flex-node/agent.sock http://agent/healthz

/healthz is 200 with a JSON report of each loop's last pass, or 503 when a
loop that needs nothing remote (keep-machine: the machine cannot be started)
failed its last pass. Its log lines go to the journal and, with their time,
to agent.log in agent.logDir (rotated at 10 MiB, 5 files kept).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			failpoint.Hit(agentupgrade.StepAgentStart)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			log := logger(cmd.ErrOrStderr(), 0)
			c, err := daemon.WaitForConfig(ctx, path, log)
			var ie *config.InvalidError
			switch {
			case errors.As(err, &ie):
				return invalid(err)
			case err != nil:
				return err
			case c == nil:
				return nil // stopped while waiting
			}
			l, err := c.Layout("/", path)
			if err != nil {
				return invalid(err)
			}
			// The journal's lines, and the same with their time in
			// agent.logDir, rotated.
			file := logfile.New(l.OnRoot(l.AgentLog()), logfile.DefaultMaxBytes, logfile.DefaultKeep)
			defer file.Close()
			log = slog.New(logfile.Tee(logger(cmd.ErrOrStderr(), levelOf(c)).Handler(), file, levelOf(c)))
			// An upgrade in flight to this agent's slot is confirmed now,
			// before waiting for the cluster: health here means this
			// binary runs, reads its config and finds its layout. An
			// error exits 1 and recovery rolls back.
			//
			// Confirming at start rather than after the agent has run for
			// a while is deliberate: what the agent does later depends on
			// the cluster (an upgrade must neither wait for it nor be
			// rolled back because it is away), and what an agent binary
			// can break on its own shows by now. A crash after the
			// confirmation is handled by Restart=, on the new slot.
			if _, err := agentupgrade.Confirm(l, agentupgrade.RunningSlot(l), log); err != nil {
				return err
			}
			a, err := daemon.New(c, l, log, daemon.WithEvidence(rolloutEvidence(l))) // issue 30: evidence on failure
			if err != nil {
				return invalid(err)
			}
			return a.Run(ctx)
		},
	}
	addConfigFlag(cmd, &path)
	return cmd
}
