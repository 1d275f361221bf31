package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// StepAgent is the step of a release's agent binary, inside the node's
// slot: the Record says Updating at agent while the agent is replaced, so
// the agent that runs next (the new one, or the last-good one recovery
// put back) knows where the node was.
const StepAgent = "agent"

// Reasons of a failed agent step.
const (
	// ReasonAgentRolledBack: the new agent crashed, exited or did not
	// confirm itself by its deadline; recovery put the last-good agent
	// back, and that agent reports this.
	ReasonAgentRolledBack = "AgentRolledBack"
	// ReasonAgentUpgradeFailed: the switch to the new agent failed
	// before the restart (nothing changed).
	ReasonAgentUpgradeFailed = "AgentUpgradeFailed"
)

// AgentHost is a Host that installs a release's agent binary with the
// agent's blue/green self-upgrade (the daemon's). Its Stage puts the
// binary, verified, in the inactive agent slot; Running compares the
// running agent's binary with rel.Agent. A Host that is not one (the
// fleet simulator's stub) stands for the whole release in Stage and
// Switch.
type AgentHost interface {
	// UpgradeAgent switches the agent to the binary Stage staged and
	// restarts the agent service on it. It returns an error when the
	// switch did not happen, and otherwise only once ctx ends: the
	// service stops this agent for the new one.
	UpgradeAgent(ctx context.Context, rel v1alpha1.Release) error
	// AgentRolledBack says whether, at or after since, recovery undid an
	// agent upgrade, with its evidence (the recovery's result).
	AgentRolledBack(since time.Time) (evidence string, rolledBack bool, err error)
}

// NodeFields says whether rel changes the node's machine (Kubernetes
// version, bundle, worker image): a release of the agent alone switches
// no machine and drains nothing.
func NodeFields(rel v1alpha1.Release) bool {
	return rel.KubernetesVersion != "" || rel.Artifacts != "" || rel.WorkerImage != ""
}

// agentStep is the release's agent binary, slot held, before the node's
// switch: the order is the agent first, so the switch, the soak and the
// report are done by the agent the release was written for, and a node
// never runs an agent that does not understand its rollout. The Record
// says Updating at agent before the restart; the agent that starts next
// resumes here (from == StepAgent): the new one finds itself running and
// goes on to the switch; the last-good one that recovery put back finds
// the rollback recovery recorded and fails the step, keeping the slot.
func (a *Agent) agentStep(ctx context.Context, r *v1alpha1.FlexNodeRollout, from string) error {
	rel := r.Spec.Release
	ah, ok := a.Host.(AgentHost)
	if rel.Agent == nil || !ok {
		return nil
	}
	running, err := a.Host.Running(ctx, v1alpha1.Release{Agent: rel.Agent})
	if err != nil {
		return fmt.Errorf("compare the release's agent with the running one: %w", err)
	}
	if running {
		if from == StepAgent {
			a.log().Info("rollout: the new agent runs; going on", "rollout", r.Name, "sha256", rel.Agent.SHA256)
		}
		return nil
	}
	if from == StepAgent {
		evidence, back, err := ah.AgentRolledBack(a.rec.Since)
		if err != nil {
			return fmt.Errorf("read the agent upgrade's outcome: %w", err)
		}
		if back {
			return &StepError{Step: StepAgent, Reason: ReasonAgentRolledBack, Err: fmt.Errorf(
				"the release's agent (sha256 %s) crashed, exited or did not confirm itself healthy by its deadline; recovery put the last-good agent back: %s", rel.Agent.SHA256, evidence)}
		}
		// The agent stopped before it switched: switch now.
	}
	if err := a.report(ctx, PhaseUpdating, StepAgent, "", fmt.Sprintf("holds slot %s; switching the agent to sha256 %s", a.rec.Slot, rel.Agent.SHA256)); err != nil {
		a.log().Warn("rollout: report the agent step", "error", err)
	}
	err = ah.UpgradeAgent(ctx, rel)
	if ctx.Err() != nil {
		return ctx.Err() // this agent is stopped for the new one, which resumes from the Record
	}
	if err == nil {
		err = errors.New("the agent service was not restarted on the new agent")
	}
	return &StepError{Step: StepAgent, Reason: ReasonAgentUpgradeFailed, Err: err}
}

// AgentVersionAnnotation is on each Node whose agent follows rollouts:
// the version of that agent, written by the agent once per start, so
// `fleet status` shows which agent each node runs (a release's agent
// binary moves it).
const AgentVersionAnnotation = "flexnode.azure.com/agent-version"

// AgentVersionPatch is the merge patch of a Node that sets
// AgentVersionAnnotation to version.
func AgentVersionPatch(version string) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AgentVersionAnnotation: version}}})
}
