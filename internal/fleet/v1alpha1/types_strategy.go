package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The API of issue 30 (plan, canary, windows, hold, rollback), inlined
// into Strategy and RolloutStatus: its own file so that it merges as one
// piece with the other changes to types.go.

// RolloutMode is whether a rollout disrupts nodes.
//
// +kubebuilder:validation:Enum=Plan;Rollout
type RolloutMode string

const (
	// ModePlan: every selected node stages the release and runs start's
	// preflight against it on its own host, and reports its verdict;
	// nothing drains. Switching to Rollout starts from the staged state.
	ModePlan RolloutMode = "Plan"
	// ModeRollout: stage, then switch in waves (the default).
	ModeRollout RolloutMode = "Rollout"
)

// MaxWindows bounds strategy.windows: a week has seven days; a few
// windows per day is already an unusual policy.
const MaxWindows = 16

// StrategyExtras are the strategy fields of issue 30, inlined into
// Strategy.
type StrategyExtras struct {
	// Mode is Plan (stage and report a verdict, disrupt nothing) or
	// Rollout (the default).
	// +optional
	// +kubebuilder:default=Rollout
	Mode RolloutMode `json:"mode,omitempty"`

	// Canary is how many of the selected nodes go first: a count (at
	// least 1) or a percentage of the selected nodes (1%-100%, rounded
	// up). Every canary must finish its soak before any other node
	// starts. Unset: no canary wave.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",message="must be a count of at least 1 or a percentage from 1% to 100%"
	Canary *intstr.IntOrString `json:"canary,omitempty"`

	// Windows are the maintenance windows a node may start a switch in,
	// judged by each node on its own clock. Staging happens at any
	// time; a window that closes while a node soaks lets it finish.
	// Unset: any time.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Windows []Window `json:"windows,omitempty"`

	// RequireAll makes held nodes (label flexnode.azure.com/hold=true)
	// block completion: Complete waits until each is released and
	// updated. Default false: held nodes are reported, not waited on.
	// +optional
	RequireAll bool `json:"requireAll,omitempty"`
}

// Weekday is a day of the week, as the windows name them.
//
// +kubebuilder:validation:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun
type Weekday string

// Window is a weekly maintenance window: it opens at Start on each of
// Days, in TimeZone, and closes at End. An End at or before Start closes
// on the next day (22:00-04:00 is overnight).
//
// +kubebuilder:validation:XValidation:rule="self.start != self.end",message="start and end must differ (a window of no time, or of a whole day, is ambiguous: list the days instead)"
type Window struct {
	// Days the window opens on.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=7
	Days []Weekday `json:"days"`

	// Start is when it opens, HH:MM (24-hour) local to TimeZone.
	// +required
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	// +kubebuilder:validation:MaxLength=5
	Start string `json:"start"`

	// End is when it closes, HH:MM; at or before Start means the next day.
	// +required
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	// +kubebuilder:validation:MaxLength=5
	End string `json:"end"`

	// TimeZone is an IANA time zone name (Europe/Berlin); default UTC.
	// Each node resolves it from its own zone database.
	// +optional
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$`
	TimeZone string `json:"timeZone,omitempty"`
}

// RollbackRequest asks every node on the release to switch back.
type RollbackRequest struct {
	// Reason is why, in the operator's words (or the failed node's, for
	// onFailure: Rollback); recorded in the status.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`

	// RequestedAt is when it was asked.
	// +optional
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`

	// RequestedBy is who asked: "fleet rollback" or "onFailure:<node>".
	// +optional
	// +kubebuilder:validation:MaxLength=256
	RequestedBy string `json:"requestedBy,omitempty"`
}

// MaxHeldNodes bounds status.heldNodes, like failedNodes.
const MaxHeldNodes = 1000

// StatusExtras are the status fields of issue 30, inlined into
// RolloutStatus.
type StatusExtras struct {
	// Held is how many selected nodes are labelled
	// flexnode.azure.com/hold=true and skipped.
	// +optional
	Held int32 `json:"held,omitempty"`

	// HeldNodes names them (sorted, bounded).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxLength=253
	HeldNodes []string `json:"heldNodes,omitempty"`

	// Plan is the verdicts of a rollout in mode Plan.
	// +optional
	Plan *PlanStatus `json:"plan,omitempty"`

	// Rollback records a rollback: when, why, how far.
	// +optional
	Rollback *RollbackStatus `json:"rollback,omitempty"`

	// Window is where the maintenance windows stand, by the status
	// writer's clock (each node judges by its own).
	// +optional
	Window *WindowStatus `json:"window,omitempty"`
}

// PlanStatus counts the verdicts of a plan: "staged 198/200: 2 failed".
type PlanStatus struct {
	// Ready is how many staged the release and passed preflight.
	// +optional
	Ready int32 `json:"ready"`
	// NotReady is how many could not (named in failedNodes).
	// +optional
	NotReady int32 `json:"notReady"`
	// Pending is how many have no verdict yet (held nodes not counted).
	// +optional
	Pending int32 `json:"pending"`
}

// RollbackStatus is the record of a rollback.
type RollbackStatus struct {
	// RequestedAt is when it was asked (spec.rollback.requestedAt, or
	// when the status writer first saw it).
	// +optional
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`
	// Reason is spec.rollback.reason.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
	// RequestedBy is spec.rollback.requestedBy.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	RequestedBy string `json:"requestedBy,omitempty"`
	// RolledBack is how many nodes are back on (or never left) their
	// previous side.
	// +optional
	RolledBack int32 `json:"rolledBack"`
	// CompletedAt is when every selected node was back.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
}

// WindowStatus says whether a maintenance window is open and when that
// changes.
type WindowStatus struct {
	// Open is whether a window is open now.
	// +optional
	Open bool `json:"open"`
	// NextOpen is when the next window opens (when none is open).
	// +optional
	NextOpen *metav1.Time `json:"nextOpen,omitempty"`
	// Closes is when the open window closes.
	// +optional
	Closes *metav1.Time `json:"closes,omitempty"`
}
