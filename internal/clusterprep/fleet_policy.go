package clusterprep

import (
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// FleetSlotPolicy is the ValidatingAdmissionPolicy that does for the
// slots what NodeRestriction does for a node's Lease: a node's credential
// may write a slot only in its own name (holderIdentity starts with its
// node name), and may not clear or rewrite a slot another node holds
// except by taking it over in its own name (which the agent does only
// for a slot that expired or whose holder's Node is gone). So one
// compromised host can hold slots itself, which disrupts only itself,
// but cannot free or fake another node's (DESIGN decision 10).
const FleetSlotPolicy = "aks-flex-node-slot-holder"

// The CEL of FleetSlotPolicy; `node` is the requesting node's name.
const (
	slotHolderNode = `has(object.spec) && has(object.spec.holderIdentity) ? object.spec.holderIdentity.split('/')[0] : ''`
	slotOldHolder  = `oldObject != null && has(oldObject.spec) && has(oldObject.spec.holderIdentity) ? oldObject.spec.holderIdentity.split('/')[0] : ''`
)

func fleetSlotPolicy(labels map[string]string) []any {
	fail := admissionv1.Fail
	deny := []admissionv1.ValidationAction{admissionv1.Deny}
	policy := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: FleetSlotPolicy, Labels: labels},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{v1alpha1.Group}, APIVersions: []string{"*"},
						Resources: []string{v1alpha1.SlotResource}},
				},
			}}},
			MatchConditions: []admissionv1.MatchCondition{{Name: "is-a-node", Expression: `request.userInfo.username.startsWith('system:node:')`}},
			Variables: []admissionv1.Variable{
				{Name: "node", Expression: `request.userInfo.username.substring(12)`},
				{Name: "holder", Expression: slotHolderNode},
				{Name: "oldHolder", Expression: slotOldHolder},
			},
			Validations: []admissionv1.Validation{
				{Expression: `variables.holder == '' || variables.holder == variables.node`,
					Message: "a node may hold a slot only in its own name (spec.holderIdentity must start with its node name)"},
				{Expression: `variables.oldHolder == '' || variables.oldHolder == variables.node || variables.holder == variables.node`,
					Message: "a node may not release or change a slot another node holds"},
			},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: FleetSlotPolicy, Labels: labels},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: FleetSlotPolicy, ValidationActions: deny},
	}
	return []any{policy, binding}
}
