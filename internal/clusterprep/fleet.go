package clusterprep

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// The names of what --fleet prints.
const (
	FleetRole           = "aks-flex-node:fleet"
	FleetSlotRole       = "aks-flex-node:fleet-slots"
	FleetWorkloadRole   = "aks-flex-node:fleet-workload-reader"
	FleetFlowSchema     = "aks-flex-node-fleet"
	FleetPriorityLevel  = "aks-flex-node-fleet"
	nodesGroup          = "system:nodes"
	fleetFlowPrecedence = 450 // below the built-in system-nodes (500), so it matches first
)

// FleetPermissions are what an agent does for rollouts beyond what the
// Node authorizer already grants it (patching its own Node's status, for
// the FlexNodeRelease condition, which NodeRestriction confines to its own
// Node): read the rollouts and write their status (the elected status
// writer), and work the slots in aks-flex-node: FlexNodeSlots, Leases in
// all but their group, because NodeRestriction refuses a node every Lease
// outside kube-node-lease (see v1alpha1.FlexNodeSlot). The status
// writer's election is one more FlexNodeSlot there (status-writer, held
// in the writer's node name, so the slot policy applies to it as to any
// slot); it reads the Nodes with NodeReaderRole and records Events on the
// rollouts in namespace default, which the Node authorizer grants every
// node already (create and patch of Events), so nothing is added here
// for them.
var FleetPermissions = []Permission{
	{Verb: "get", Group: v1alpha1.Group, Resource: v1alpha1.Resource},
	{Verb: "list", Group: v1alpha1.Group, Resource: v1alpha1.Resource},
	{Verb: "watch", Group: v1alpha1.Group, Resource: v1alpha1.Resource},
	{Verb: "update", Group: v1alpha1.Group, Resource: v1alpha1.Resource, Subresource: "status"},
	{Verb: "get", Group: v1alpha1.Group, Resource: v1alpha1.SlotResource, Namespace: v1alpha1.Namespace},
	{Verb: "list", Group: v1alpha1.Group, Resource: v1alpha1.SlotResource, Namespace: v1alpha1.Namespace},
	{Verb: "watch", Group: v1alpha1.Group, Resource: v1alpha1.SlotResource, Namespace: v1alpha1.Namespace},
	{Verb: "create", Group: v1alpha1.Group, Resource: v1alpha1.SlotResource, Namespace: v1alpha1.Namespace},
	{Verb: "update", Group: v1alpha1.Group, Resource: v1alpha1.SlotResource, Namespace: v1alpha1.Namespace},
}

// FleetWorkloadPermissions are what a soak reads to tell that the pods
// its drain evicted are back: the ReplicaSets and StatefulSets that owned
// them, each by the name its pods' owner references give (get only: no
// list or watch, so a node cannot enumerate the cluster's workloads; it
// reads replica counts, though a get returns the whole object, pod
// template included). Without it the soak checks DaemonSet pods only.
var FleetWorkloadPermissions = []Permission{
	{Verb: "get", Group: "apps", Resource: "replicasets"},
	{Verb: "get", Group: "apps", Resource: "statefulsets"},
}

func fleetWorkloadRole(labels map[string]string) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: FleetWorkloadRole, Labels: labels},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"replicasets", "statefulsets"}, Verbs: []string{"get"}}},
	}
}

// FleetObjects are what a cluster needs before its flex nodes follow
// FlexNodeRollouts: the CRDs of the rollouts and their slots (generated
// from the Go types), the namespace of the slots, the roles bound to system:nodes (every node's group,
// whatever credential it signed in with), the node reader role (a rollout
// selects Nodes by label and its status writer reads their conditions),
// the workload reader role (a soak's pods back: FleetWorkloadPermissions),
// the admission policy that confines a node to its own slots, and a
// FlowSchema with its own priority level for the agents' rollout
// traffic.
func FleetObjects() ([]any, error) {
	var crd, slotCRD map[string]any
	if err := yaml.Unmarshal(v1alpha1.CRD, &crd); err != nil {
		return nil, fmt.Errorf("the embedded FlexNodeRollout CRD: %w", err)
	}
	if err := yaml.Unmarshal(v1alpha1.SlotCRD, &slotCRD); err != nil {
		return nil, fmt.Errorf("the embedded FlexNodeSlot CRD: %w", err)
	}
	labels := map[string]string{"app.kubernetes.io/managed-by": "aks-flex-node"}
	ns := &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.Namespace, Labels: labels},
	}
	role := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: FleetRole, Labels: labels},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{v1alpha1.Group}, Resources: []string{v1alpha1.Resource}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{v1alpha1.Group}, Resources: []string{v1alpha1.Resource + "/status"}, Verbs: []string{"get", "update", "patch"}},
		},
	}
	leaseRole := &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: metav1.ObjectMeta{Name: FleetSlotRole, Namespace: v1alpha1.Namespace, Labels: labels},
		// No delete: a slot is released by clearing its holder, and
		// FleetSlotPolicy bounds what a node may write to one.
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.Group}, Resources: []string{v1alpha1.SlotResource},
			Verbs: []string{"get", "list", "watch", "create", "update"}}},
	}
	leaseBinding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: FleetSlotRole, Namespace: v1alpha1.Namespace, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: FleetSlotRole},
		Subjects:   group(nodesGroup),
	}
	objs := []any{crd, slotCRD, ns, role, binding(FleetRole, FleetRole, group(nodesGroup)), leaseRole, leaseBinding,
		nodeReaderRole(), binding(NodeReaderRole, NodeReaderRole, group(nodesGroup)),
		fleetWorkloadRole(labels), binding(FleetWorkloadRole, FleetWorkloadRole, group(nodesGroup))}
	objs = append(objs, fleetSlotPolicy(labels)...)
	return append(objs, fleetFlowControl(labels)...), nil
}

// fleetFlowControl is the suggested API Priority and Fairness for the
// agents' rollout requests (issue 31): without it they fall under the
// built-in system-nodes FlowSchema with the kubelets' heartbeats, and a
// thousand agents watching rollouts and renewing slots would share the
// kubelets' seats. A FlowSchema matches subjects and resources, not the
// user agent (aks-flex-node/<version> names the agent in the audit log
// and metrics only), so this one matches group system:nodes on the
// rollouts and the Leases of aks-flex-node (the agents' traffic), and on
// lists and watches of Nodes: each agent's one Node informer lists every
// Node, and the simulator at 1,000 nodes saw those lists, piled up after
// a restart of the fleet, time out 16,000 requests of the built-in
// node-high level in 10 minutes, kubelets' Lease renewals among them. A
// kubelet's own list and watch of its Node (a field selector, which a
// FlowSchema cannot see) moves here too; its heartbeats (Lease updates,
// Node status patches) stay on node-high. One flow per node (ByUser), so
// one noisy node queues behind itself.
func fleetFlowControl(labels map[string]string) []any {
	shares, lendable := int32(10), int32(50)
	pl := &flowcontrolv1.PriorityLevelConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "flowcontrol.apiserver.k8s.io/v1", Kind: "PriorityLevelConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: FleetPriorityLevel, Labels: labels},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: &shares,
				LendablePercent:          &lendable,
				LimitResponse: flowcontrolv1.LimitResponse{
					Type:    flowcontrolv1.LimitResponseTypeQueue,
					Queuing: &flowcontrolv1.QueuingConfiguration{Queues: 64, HandSize: 6, QueueLengthLimit: 50},
				},
			},
		},
	}
	fs := &flowcontrolv1.FlowSchema{
		TypeMeta:   metav1.TypeMeta{APIVersion: "flowcontrol.apiserver.k8s.io/v1", Kind: "FlowSchema"},
		ObjectMeta: metav1.ObjectMeta{Name: FleetFlowSchema, Labels: labels},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: FleetPriorityLevel},
			MatchingPrecedence:         fleetFlowPrecedence,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: nodesGroup}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{
					{Verbs: []string{"*"}, APIGroups: []string{v1alpha1.Group}, Resources: []string{v1alpha1.Resource, v1alpha1.Resource + "/status"}, ClusterScope: true},
					{Verbs: []string{"*"}, APIGroups: []string{v1alpha1.Group}, Resources: []string{v1alpha1.SlotResource}, Namespaces: []string{v1alpha1.Namespace}},
					{Verbs: []string{"list", "watch"}, APIGroups: []string{""}, Resources: []string{"nodes"}, ClusterScope: true},
				},
			}},
		},
	}
	return []any{pl, fs}
}
