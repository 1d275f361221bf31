package fleet

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// EventReason is the reason of the Event the agent records on its Node
// when it enters phase p: RolloutStaged, RolloutUpdating, RolloutUpdated,
// RolloutFailed, RolloutManagedElsewhere.
func EventReason(p Phase) string { return "Rollout" + string(p) }

// reportTimeout bounds one write of the Node's condition.
const reportTimeout = 30 * time.Second

// report moves the node to phase at step: the Record first (the truth a
// restarted agent resumes from), then the Node's FlexNodeRelease
// condition, and, when phase or step changed, one log line, an Event on
// the Node and the metrics. The condition's write is tried a few times;
// its error is returned (the Record has moved regardless).
func (a *Agent) report(ctx context.Context, phase Phase, step, reason, msg string) error {
	a.repMu.Lock()
	defer a.repMu.Unlock()
	moved := a.rec.Phase != phase || a.rec.Step != step
	now := a.now()
	if moved {
		a.rec.Since = now
	}
	a.rec.Phase, a.rec.Step, a.rec.Reason = phase, step, reason
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	a.rec.Message = msg
	// Written ahead: a Record that says Unreported is told again once
	// the API server answers (issue 30 item 8, agent_pending.go).
	a.rec.Unreported = true
	if err := a.save(); err != nil {
		return err
	}
	if moved {
		a.announce(ctx)
	}
	if err := a.setCondition(ctx, now); err != nil {
		return err
	}
	a.rec.Unreported = false
	return a.save()
}

// announce is a phase change's log line, Event and metrics.
func (a *Agent) announce(ctx context.Context) {
	rec := a.rec
	line := fmt.Sprintf("rollout %s generation %d: %s", rec.Rollout, rec.Generation, rec.Phase)
	if rec.Step != "" {
		line += " at " + rec.Step
	}
	if rec.Reason != "" {
		line += " (" + rec.Reason + ")"
	}
	if rec.Message != "" {
		line += ": " + rec.Message
	}
	if rec.Phase == PhaseFailed {
		a.log().Warn(line, "slot", rec.Slot)
	} else {
		a.log().Info(line, "slot", rec.Slot)
	}
	if a.Events != nil {
		t := corev1.EventTypeNormal
		if rec.Phase == PhaseFailed {
			t = corev1.EventTypeWarning
		}
		a.recordEvent(ctx, t, EventReason(rec.Phase), line)
	}
	a.metricsPhase(rec.Rollout, rec.Phase)
}

func (a *Agent) metricsPhase(rollout string, p Phase) {
	if a.Metrics == nil {
		return
	}
	a.Metrics.RolloutPhase(rollout, string(p))
	held := 0
	if a.rec.Slot != "" {
		held = 1
	}
	a.Metrics.RolloutSlotsHeld(held)
}

// setCondition writes the Record's phase as the Node's condition (a
// strategic merge patch of nodes/status: the condition alone); its
// transition time is the Record's Since, which moves only with phase or
// step.
func (a *Agent) setCondition(ctx context.Context, now time.Time) error {
	rec := a.rec
	c := NodeRelease{Rollout: rec.Rollout, Generation: rec.Generation, Phase: rec.Phase, Step: rec.Step,
		Reason: rec.Reason, Message: rec.Message, Since: rec.Since}.Condition(now)
	patch, err := ConditionPatch(c)
	if err != nil {
		return err
	}
	for attempt := range 3 {
		pctx, cancel := context.WithTimeout(ctx, reportTimeout)
		_, err = a.conn().Nodes.Patch(pctx, a.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if !sleep(ctx, time.Duration(attempt+1)*time.Second) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("set Node %s's %s condition: %w", a.NodeName, ConditionType, err)
}

// save writes the Record.
func (a *Agent) save() error {
	if a.RecordPath == "" {
		return nil
	}
	if err := SaveRecord(a.RecordPath, a.rec); err != nil {
		return fmt.Errorf("save the rollout record: %w", err)
	}
	return nil
}
