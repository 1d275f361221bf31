package fleet

import (
	corev1 "k8s.io/api/core/v1"
)

// HoldLabel on a Node keeps it out of every rollout while its value is
// "true": its agent reports Held and takes no slot. Checked before a
// slot is taken, never during a switch: a node already switching
// finishes (or rolls back) first, so a late label cannot leave it
// half-way.
const HoldLabel = "flexnode.azure.com/hold"

// ReasonHoldLabel is the Held condition's reason.
const ReasonHoldLabel = "HoldLabel"

// Held is whether n carries the hold label set to true.
func Held(n *corev1.Node) bool { return n.Labels[HoldLabel] == "true" }

// HeldRelease is the condition a held node reports for rollout at
// generation gen.
func HeldRelease(rollout string, gen int64) NodeRelease {
	return NodeRelease{Rollout: rollout, Generation: gen, Phase: PhaseHeld, Reason: ReasonHoldLabel,
		Message: "label " + HoldLabel + "=true: skipped until it is removed"}
}
