package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// FlexNodeRollout is one release for the flex nodes its selector picks,
// applied in waves by the nodes' own agents: at most maxUnavailable of
// them switching at once, each holding a Lease slot in the aks-flex-node
// namespace. Cluster-scoped because it selects Nodes, which are.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=fnr,categories=flexnode
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Selected",type=integer,JSONPath=`.status.selected`
// +kubebuilder:printcolumn:name="Staged",type=integer,JSONPath=`.status.staged`
// +kubebuilder:printcolumn:name="Updating",type=integer,JSONPath=`.status.updating`
// +kubebuilder:printcolumn:name="Updated",type=integer,JSONPath=`.status.updated`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failed`
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=`.spec.paused`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FlexNodeRollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RolloutSpec   `json:"spec"`
	Status RolloutStatus `json:"status,omitempty"`
}

// FlexNodeRolloutList is a page of rollouts, as list and watch return them.
//
// +kubebuilder:object:root=true
type FlexNodeRolloutList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FlexNodeRollout `json:"items"`
}

// RolloutSpec is the goal: which nodes, what release, how fast.
type RolloutSpec struct {
	// NodeSelector picks the Nodes this rollout applies to, by label. An
	// empty selector ({}) selects every Node; it is required so that
	// "every Node" is written down, never the result of a forgotten field.
	// +required
	NodeSelector *metav1.LabelSelector `json:"nodeSelector"`

	// Release is what the selected nodes move to. Each field is optional;
	// a missing one leaves that part of the node as it is.
	// +required
	Release Release `json:"release"`

	// Strategy bounds the disruption.
	// +optional
	// +kubebuilder:default={}
	Strategy Strategy `json:"strategy,omitempty"`

	// Paused stops new nodes from taking a slot; nodes already switching
	// finish (or roll back) and release their slots as usual.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// Release is one version of the node's parts. At least one is set.
//
// +kubebuilder:validation:MinProperties=1
type Release struct {
	// KubernetesVersion is the kubelet's version, e.g. v1.35.4.
	// +optional
	// +kubebuilder:validation:Pattern=`^v[0-9]+\.[0-9]+\.[0-9]+$`
	// +kubebuilder:validation:MaxLength=32
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`

	// Artifacts is the source of the node bundle (oci://… or https://…).
	// +optional
	// +kubebuilder:validation:Pattern=`^(oci|https)://[^\s]+$`
	// +kubebuilder:validation:MaxLength=2048
	Artifacts string `json:"artifacts,omitempty"`

	// WorkerImage is the worker (machine) image, pinned by digest:
	// registry/repository[:tag]@sha256:<64 hex>. A tag alone is refused:
	// every node of one rollout must run the same bytes.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9._:/-]*[a-z0-9])?(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?@sha256:[a-f0-9]{64}$`
	// +kubebuilder:validation:MaxLength=512
	WorkerImage string `json:"workerImage,omitempty"`

	// Agent is the aks-flex-node binary the nodes upgrade to.
	// +optional
	Agent *AgentRelease `json:"agent,omitempty"`
}

// AgentRelease is an agent binary and the digest it must have.
type AgentRelease struct {
	// URL is where the binary is fetched from (https).
	// +required
	// +kubebuilder:validation:Pattern=`^https://[^\s]+$`
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`

	// SHA256 is the binary's SHA-256, 64 lower-case hex digits.
	// +required
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{64}$`
	SHA256 string `json:"sha256"`
}

// FailurePolicy is what a rollout does when a node fails.
//
// +kubebuilder:validation:Enum=Pause
type FailurePolicy string

// FailurePause keeps the failed node's slot, so no other node starts
// while it holds it: the rollout pauses by itself.
const FailurePause FailurePolicy = "Pause"

// Strategy is how many nodes switch at once and how long each must prove
// itself.
type Strategy struct {
	// MaxUnavailable is how many selected nodes may be switching at once:
	// a count (at least 1) or a percentage of the selected nodes (1%-100%,
	// rounded up, at least one node).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",message="must be a count of at least 1 or a percentage from 1% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// Soak is how long a node must stay healthy on the new side before
	// its slot is free for the next node.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must not be negative"
	Soak *metav1.Duration `json:"soak,omitempty"`

	// DrainTimeout bounds the drain before the switch; a drain that does
	// not finish in it fails the node.
	// +optional
	// +kubebuilder:default="15m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="must be positive"
	DrainTimeout *metav1.Duration `json:"drainTimeout,omitempty"`

	// OnFailure is what a failed node does to the rollout.
	// +optional
	// +kubebuilder:default=Pause
	OnFailure FailurePolicy `json:"onFailure,omitempty"`
}

// RolloutStatus is the rollout as its nodes report it, aggregated by one
// elected agent from the Nodes' FlexNodeRelease conditions.
type RolloutStatus struct {
	// ObservedGeneration is the spec generation these counts are about.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Selected is how many Nodes the selector picks.
	// +optional
	Selected int32 `json:"selected"`
	// Staged is how many have the release fetched and verified on their
	// inactive side and wait for a slot.
	// +optional
	Staged int32 `json:"staged"`
	// Updating is how many are switching or soaking (each holds a slot).
	// +optional
	Updating int32 `json:"updating"`
	// Updated is how many run the release at this generation.
	// +optional
	Updated int32 `json:"updated"`
	// Failed is how many failed; each keeps its slot.
	// +optional
	Failed int32 `json:"failed"`

	// FailedNodes names the failed nodes and why.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1000
	FailedNodes []FailedNode `json:"failedNodes,omitempty"`

	// ManagedElsewhere names the selected nodes whose Machine is managed
	// by AKS through ARM: they never take a slot, AKS drives their
	// updates, and they do not count toward Complete.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxLength=253
	ManagedElsewhere []string `json:"managedElsewhere,omitempty"`

	// Conditions are Progressing, Paused and Complete.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FailedNode is one node that failed and the step it failed in.
type FailedNode struct {
	// Name is the Node's name.
	// +required
	Name string `json:"name"`
	// Step is where it failed: stage, drain, switch or soak.
	// +optional
	Step string `json:"step,omitempty"`
	// Reason is a CamelCase reason, as on the Node's condition.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is the error, bounded.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// The rollout's condition types.
const (
	// ConditionProgressing is True while nodes can still move toward the
	// release (not paused, not complete).
	ConditionProgressing = "Progressing"
	// ConditionPaused is True when spec.paused is set or a failed node
	// holds a slot.
	ConditionPaused = "Paused"
	// ConditionComplete is True when every selected node is Updated at
	// the rollout's generation: what `kubectl wait --for=condition=Complete`
	// waits on.
	ConditionComplete = "Complete"
)
