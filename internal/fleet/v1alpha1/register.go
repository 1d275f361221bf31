package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group, version and resource of the API, as REST paths and RBAC name them.
const (
	Group    = "flexnode.azure.com"
	Version  = "v1alpha1"
	Resource = "flexnoderollouts"
	Kind     = "FlexNodeRollout"
)

// SchemeGroupVersion is flexnode.azure.com/v1alpha1.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// AddToScheme registers the rollout types, for a REST client's codecs.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &FlexNodeRollout{}, &FlexNodeRolloutList{}, &FlexNodeSlot{}, &FlexNodeSlotList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// Namespace holds the rollouts' slots (FlexNodeSlots); cluster prepare
// --fleet creates it.
const Namespace = "aks-flex-node"

// OwnerReference is r as the owner of its slots (a cluster-scoped owner of
// namespaced dependents, which the garbage collector allows).
func OwnerReference(r *FlexNodeRollout) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: SchemeGroupVersion.String(), Kind: Kind, Name: r.Name, UID: r.UID}
}
