package fleet

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// EvidenceHost is what a Host adds so a failed node attaches evidence
// (issue 30, item 7): it names the failed side, reads its journals
// (Evidence.CollectJournals with supportbundle.JournalTail) and writes
// the debug bundle on the host, naming its path in e.Bundle. A Host
// without it still attaches the step, the error and the timing.
type EvidenceHost interface {
	FailureEvidence(ctx context.Context, e *Evidence)
}

// ReasonFailureEvidence is the reason of the Event that carries a
// failure's evidence on the Node.
const ReasonFailureEvidence = "RolloutFailureEvidence"

// evidenceTimeout bounds collecting and attaching evidence: it is on the
// way to reporting the failure and must not hold it up for long.
const evidenceTimeout = 2 * time.Minute

// attachEvidence puts the evidence of a failure at step on the node's
// own Node (annotation EvidenceAnnotation, for fleet status --node) and
// in a Warning Event (Message, 1 KiB). Errors are logged: evidence never
// changes the outcome it documents.
func (a *Agent) attachEvidence(ctx context.Context, step, reason string, cause error) {
	ctx, cancel := context.WithTimeout(ctx, evidenceTimeout)
	defer cancel()
	now := a.now()
	e := Evidence{Node: a.NodeName, Rollout: a.rec.Rollout, Generation: a.rec.Generation, Step: step, Reason: reason,
		Error: bounded(cause.Error(), 2048), At: now}
	if !a.rec.Since.IsZero() && a.rec.Step != "" {
		e.Phases = append(e.Phases, PhaseTiming{Step: a.rec.Step, Start: a.rec.Since, Duration: now.Sub(a.rec.Since)})
	}
	if eh, ok := a.Host.(EvidenceHost); ok {
		eh.FailureEvidence(ctx, &e)
	}
	patch, err := EvidencePatch(e)
	if err == nil {
		_, err = a.conn().Nodes.Patch(ctx, a.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil {
		a.log().Warn("rollout: attach the failure's evidence to the Node", "error", err)
	}
	if a.Events != nil {
		_ = a.Events.Record(ctx, corev1.EventTypeWarning, ReasonFailureEvidence, e.Message(MaxEventMessage))
	}
}
