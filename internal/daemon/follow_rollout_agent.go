package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/systemd"
)

// A release's agent binary on this host: agentupgrade's blue/green slots.
// Stage fetches and verifies it into the inactive slot (the agent keeps
// running); UpgradeAgent, in the fleet slot, switches to it and restarts
// the service; the new agent confirms itself at its start or recovery
// puts last-good back, and AgentRolledBack reads what recovery recorded.

var _ fleet.AgentHost = (*rolloutHost)(nil)

// agentLockWait is how long staging and applying the agent binary wait
// for the node lock: the agent's own loops (drift repair) hold it for
// moments, and a turn in the slot should not fail for that.
var agentLockWait = nodelock.Wait{Timeout: 2 * time.Minute}

// stageAgent stages rel's agent binary unless it runs already. A checksum
// that does not match is ChecksumMismatch, a URL that does not answer
// AgentUnreachable, a binary that does not run AgentDoesNotRun; each
// names the URL without its credentials.
func (h *rolloutHost) stageAgent(ctx context.Context, rel v1alpha1.Release) error {
	if rel.Agent == nil {
		return nil
	}
	if ok, err := h.Running(ctx, v1alpha1.Release{Agent: rel.Agent}); err != nil || ok {
		return err
	}
	plan, err := agentupgrade.Stage(ctx, h.layout, agentupgrade.StageOptions{URL: rel.Agent.URL, SHA256: rel.Agent.SHA256, Log: h.log, Lock: agentLockWait})
	if err != nil {
		return agentStageError(err)
	}
	h.log.Info(followRolloutLoop+": staged the release's agent binary", "slot", plan.ToSlot, "version", plan.ToVersion, "from", plan.Source)
	return nil
}

func agentStageError(err error) error {
	if busy(err) {
		return fmt.Errorf("%w: %w", fleet.ErrBusy, err)
	}
	reason := "AgentStageFailed"
	msg := err.Error()
	var re *agentupgrade.RefusedError
	switch {
	case strings.Contains(msg, "checksum mismatch"):
		reason = "ChecksumMismatch"
	case strings.Contains(msg, "does not run"):
		reason = "AgentDoesNotRun"
	case errors.As(err, &re):
		reason = "AgentRefused"
	case strings.Contains(msg, "download "):
		reason = "AgentUnreachable"
	}
	return &fleet.StepError{Step: fleet.StepStage, Reason: reason, Err: fmt.Errorf("spec.release.agent: %w", err)}
}

// UpgradeAgent applies the staged binary (agentupgrade.Apply) and waits
// for the restart to stop this agent. When the switch was made but the
// restart did not come (a failed systemctl), recovery resolves the
// upgrade at its deadline and restarts the agent: this waits for that
// too, then says what it found.
func (h *rolloutHost) UpgradeAgent(ctx context.Context, rel v1alpha1.Release) error {
	if rel.Agent == nil {
		return errors.New("the release names no agent binary")
	}
	plan, err := agentupgrade.Apply(ctx, h.layout, agentupgrade.ApplyOptions{URL: rel.Agent.URL, SHA256: rel.Agent.SHA256,
		Manager: systemd.NewManager(h.layout.Root()), Log: h.log, Lock: agentLockWait})
	if plan.Unchanged && err == nil {
		return errors.New("the agent already runs the release's binary")
	}
	in, lerr := agentupgrade.LoadInFlight(h.layout)
	if in == nil || lerr != nil {
		if err == nil {
			err = errors.New("the upgrade record is gone before the restart")
		}
		return err // nothing was switched
	}
	h.log.Info(followRolloutLoop+": switched the agent; waiting to be restarted on it", "from", plan.FromVersion, "to", plan.ToVersion,
		"slot", plan.ToSlot, "deadline", in.Deadline.UTC().Format(time.RFC3339), "error", err)
	t := time.NewTimer(time.Until(in.Deadline) + time.Minute)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	res, _ := agentupgrade.LoadResult(h.layout)
	return fmt.Errorf("switched the agent to %s but this agent was not stopped by the deadline %s (last result %+v)", plan.ToVersion, in.Deadline.UTC().Format(time.RFC3339), res)
}

// AgentRolledBack reads the result recovery left (agentupgrade's
// upgrade-result record) when it undid an upgrade at or after since.
func (h *rolloutHost) AgentRolledBack(since time.Time) (string, bool, error) {
	res, err := agentupgrade.RolledBackSince(h.layout, since)
	if err != nil || res == nil {
		return "", false, err
	}
	return fmt.Sprintf("%s by %s at %s: %s -> %s: %s (journalctl -u %s)", res.Result, res.By, res.Time,
		res.FromVersion, res.ToVersion, res.Reason, layout.RecoveryUnit), true, nil
}

// announceAgentVersion puts this agent's version on its Node
// (fleet.AgentVersionAnnotation), once per process: one write per agent
// start, so fleet status shows each node's agent.
func (f *RolloutFollower) announceAgentVersion(ctx context.Context, nodes fleet.NodeClient, name string) {
	if f.versionSent {
		return
	}
	patch, err := fleet.AgentVersionPatch(buildinfo.Version)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, kubeclient.AgentLoop.Timeout)
		_, err = nodes.Patch(pctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		cancel()
	}
	if err != nil {
		f.Keeper.Log.Warn(followRolloutLoop+": put the agent's version on the Node; trying again at the next pass", "error", err)
		return
	}
	f.versionSent = true
}
