package fleet

import (
	"fmt"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// action is what one pass of the agent does next.
type action int

const (
	// actWait: nothing to do until the next change (why says what it
	// waits for).
	actWait action = iota
	// actForget: no rollout selects the node any more: its progress is
	// dropped (the Applied release stays).
	actForget
	// actManagedElsewhere: report ManagedElsewhere; never a slot.
	actManagedElsewhere
	// actStart: compare with what the node runs, then stage.
	actStart
	// actTakeSlot: staged; take a slot and switch.
	actTakeSlot
	// actResume: a switch or soak was in flight when the agent stopped:
	// re-adopt the slot and continue.
	actResume
	// actRetry: Failed and resumed: retry from stage once the slot is
	// cleared.
	actRetry
)

func (a action) String() string {
	return [...]string{"wait", "forget", "managed-elsewhere", "start", "take-slot", "resume", "retry"}[a]
}

// view is what a pass decides on: the rollout that selects the node (nil
// when none), the Record, and the other selected nodes' phases.
type view struct {
	rollout          *v1alpha1.FlexNodeRollout
	rec              Record
	managedElsewhere bool
	// failedPeers are the selected Nodes that report Failed at the
	// rollout's generation.
	failedPeers []string
}

// decide is the agent's decision table: pure, so it is tested on its own.
func decide(v view) (action, string) {
	r, rec := v.rollout, v.rec
	if r == nil {
		if rec.Rollout != "" && rec.Phase != "" {
			return actForget, "no rollout selects this Node any more"
		}
		return actWait, "no rollout selects this Node"
	}
	if v.managedElsewhere {
		if rec.Phase == PhaseManagedElsewhere && rec.UID == r.UID && rec.Generation == r.Generation {
			return actWait, "managed by its AKS Machine"
		}
		return actManagedElsewhere, "the config names an AKS Machine: AKS drives its disruption"
	}
	if rec.UID != r.UID {
		if rec.Phase == PhaseUpdating && rec.Rollout == r.Name {
			// The rollout was deleted and made again under its name while
			// this node switched: its slots went with the old one.
			return actStart, "rollout " + r.Name + " was made anew"
		}
		return actStart, fmt.Sprintf("rollout %s generation %d selects this Node", r.Name, r.Generation)
	}
	switch rec.Phase {
	case PhaseUpdating:
		return actResume, "a " + rec.Step + " was in flight when the agent stopped"
	case PhaseFailed:
		if resumedAt(r) != rec.ResumedAt {
			return actRetry, "rollout " + r.Name + " was resumed at " + resumedAt(r)
		}
		if rec.Slot == "" && rec.Generation != r.Generation {
			return actStart, fmt.Sprintf("failed to stage generation %d; generation %d is another release", rec.Generation, r.Generation)
		}
		return actWait, "failed at " + rec.Step + " (" + rec.Reason + "); waits for fleet resume"
	}
	if rec.Generation != r.Generation || rec.Phase == "" || rec.Phase == PhaseManagedElsewhere {
		return actStart, fmt.Sprintf("rollout %s generation %d", r.Name, r.Generation)
	}
	if rec.Phase == PhaseUpdated {
		return actWait, "runs the release"
	}
	// Staged.
	switch {
	case r.Spec.Paused:
		return actWait, "staged; the rollout is paused"
	case len(v.failedPeers) > 0:
		return actWait, "staged; the rollout pauses while nodes report Failed: " + strings.Join(v.failedPeers, ", ")
	}
	return actTakeSlot, "staged; taking a slot"
}

func resumedAt(r *v1alpha1.FlexNodeRollout) string { return r.Annotations[AnnotationResumedAt] }
