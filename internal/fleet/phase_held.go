package fleet

// The phases issue 30 adds to the FlexNodeRelease condition, in their own
// file so that release.go (owned by the agent's loop) changes by one
// marked case line in ReadNodeRelease.
const (
	// PhaseHeld: the Node is labelled flexnode.azure.com/hold=true; its
	// agent takes no slot and starts nothing until the label goes. Not a
	// failure: it does not pause the rollout, and it blocks Complete only
	// when strategy.requireAll is set.
	PhaseHeld Phase = "Held"
	// PhaseRolledBack: under spec.rollback, the node runs its previous
	// side again (step rollback) or never left it (reason NotSwitched).
	PhaseRolledBack Phase = "RolledBack"
)
