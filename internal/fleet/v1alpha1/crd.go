package v1alpha1

import _ "embed"

// CRD is the CustomResourceDefinition YAML generated from these types by
// controller-gen (see the package comment): what `cluster prepare --fleet`
// prints.
//
//go:embed crd/flexnode.azure.com_flexnoderollouts.yaml
var CRD []byte

// ControllerGen is the controller-gen the CRD and deep copies are made
// with; run through `go run` so that its own k8s.io modules never enter
// this module's go.mod.
const ControllerGen = "sigs.k8s.io/controller-tools/cmd/controller-gen@v0.20.1"
