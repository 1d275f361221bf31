package agentupgrade

// Steps of agent-upgrade, in order. Each is a failpoint in test builds
// (internal/failpoint): the crash-consistency tests kill -9 the process, or
// cut the host's power, at every one of them, reading this list, so a step
// added here is tested without anyone remembering to.
const (
	StepVerified    = "upgrade-verified"     // candidate staged in the lib dir, checksum verified
	StepTested      = "upgrade-tested"       // candidate test-run (version --output json)
	StepSlotWritten = "upgrade-slot-written" // candidate renamed into the inactive slot
	StepTimerArmed  = "upgrade-timer-armed"  // deadline timer started
	StepRecorded    = "upgrade-recorded"     // in-flight record written
	StepSwitched    = "upgrade-switched"     // current renamed to the new slot
	StepRestarted   = "upgrade-restarted"    // agent restarted on the new slot
)

// Steps of the new agent's start and confirmation, in order.
const (
	StepAgentStart      = "agent-start"       // the agent process started (before its config is read)
	StepConfirmChecked  = "confirm-checked"   // the new agent passed its self-check
	StepConfirmLastGood = "confirm-last-good" // last-good moved to the new slot
	StepConfirmResult   = "confirm-result"    // result record written, before the in-flight record is cleared
)

// StepConfirm is where a test build that must never confirm skips
// confirmation (failpoint action "skip"); it is not a crash step.
const StepConfirm = "confirm"

// UpgradeSteps and AgentSteps list the crash steps in order.
var (
	UpgradeSteps = []string{StepVerified, StepTested, StepSlotWritten, StepTimerArmed, StepRecorded, StepSwitched, StepRestarted}
	AgentSteps   = []string{StepAgentStart, StepConfirmChecked, StepConfirmLastGood, StepConfirmResult}
)
