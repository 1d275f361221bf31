package v1alpha1

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FlexNodeSlot is one of a rollout's maxUnavailable slots: a Lease in all
// but its group. Its spec is coordination.k8s.io/v1's LeaseSpec, and it is
// taken, renewed and released exactly as a Lease is (compare-and-swap on
// resourceVersion). It exists because the API server's NodeRestriction
// admission plugin refuses a node's credential every Lease outside
// kube-node-lease ("can only access leases in the kube-node-lease system
// namespace"), and the agents act as their nodes (DESIGN decision 10);
// NodeRestriction does not govern custom resources, so RBAC alone decides.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=fns,categories=flexnode
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.spec.holderIdentity`
// +kubebuilder:printcolumn:name="Renewed",type=date,JSONPath=`.spec.renewTime`
// +kubebuilder:printcolumn:name="Failed",type=string,JSONPath=`.metadata.annotations.flexnode\.azure\.com/failed-reason`
type FlexNodeSlot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is a Lease's: holderIdentity (node/nodeUID/bootID),
	// leaseDurationSeconds, acquireTime, renewTime, leaseTransitions.
	// +optional
	Spec coordinationv1.LeaseSpec `json:"spec,omitempty"`
}

// FlexNodeSlotList is a page of slots.
//
// +kubebuilder:object:root=true
type FlexNodeSlotList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FlexNodeSlot `json:"items"`
}

// SlotResource is the slots' REST resource.
const SlotResource = "flexnodeslots"
