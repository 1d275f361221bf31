// Package v1alpha1 owns the FlexNodeRollout API (flexnode.azure.com/v1alpha1):
// the Go types a rollout is decoded into, their validation with field
// paths, and the CustomResourceDefinition generated from those types by
// controller-gen (crd/, embedded as CRD and SlotCRD). The types are the source of
// truth: `make crds` regenerates the YAML and the deep copies, and
// TestCRDMatchesTypes fails when they drift.
//
// +kubebuilder:object:generate=true
// +groupName=flexnode.azure.com
package v1alpha1

//go:generate go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.20.1 object crd paths=. output:crd:dir=crd
