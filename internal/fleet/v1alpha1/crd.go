package v1alpha1

import _ "embed"

// The CustomResourceDefinitions generated from these types by
// controller-gen (see the package comment): what `cluster prepare --fleet`
// prints.
var (
	//go:embed crd/flexnode.azure.com_flexnoderollouts.yaml
	CRD []byte
	//go:embed crd/flexnode.azure.com_flexnodeslots.yaml
	SlotCRD []byte
)

// ControllerGen is the controller-gen the CRDs and deep copies are made
// with; run through `go run` so that its own k8s.io modules never enter
// this module's go.mod.
const ControllerGen = "sigs.k8s.io/controller-tools/cmd/controller-gen@v0.20.1"
