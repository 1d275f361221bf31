package clusterprep

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// TestFleetObjects parses what `cluster prepare --fleet` prints and checks
// that it holds the two CRDs, the slots' namespace, and RBAC bound to
// system:nodes granting exactly FleetPermissions, and a FlowSchema that
// matches the agents' rollout traffic before the built-in system-nodes.
func TestFleetObjects(t *testing.T) {
	objs, err := FleetObjects()
	if err != nil {
		t.Fatal(err)
	}
	data, err := Render("prepare --fleet", objs)
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string][][]byte{}
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		if meta.Kind != "" {
			byKind[meta.Kind] = append(byKind[meta.Kind], doc)
		}
	}
	var crd struct {
		Metadata struct{ Name string }
		Spec     struct{ Group, Scope string }
	}
	if len(byKind["CustomResourceDefinition"]) != 2 {
		t.Fatalf("%d CRDs, want the rollouts' and the slots'", len(byKind["CustomResourceDefinition"]))
	}
	must(t, yaml.Unmarshal(byKind["CustomResourceDefinition"][0], &crd))
	if crd.Metadata.Name != v1alpha1.Resource+"."+v1alpha1.Group || crd.Spec.Scope != "Cluster" {
		t.Errorf("CRD %+v", crd)
	}
	must(t, yaml.Unmarshal(byKind["CustomResourceDefinition"][1], &crd))
	if crd.Metadata.Name != v1alpha1.SlotResource+"."+v1alpha1.Group || crd.Spec.Scope != "Namespaced" {
		t.Errorf("slot CRD %+v", crd)
	}
	var ns struct{ Metadata struct{ Name string } }
	one(t, byKind, "Namespace", &ns)
	if ns.Metadata.Name != v1alpha1.Namespace {
		t.Errorf("namespace %q", ns.Metadata.Name)
	}

	// Every permission is granted by a role bound to system:nodes.
	var rules = map[string][]rbacv1.PolicyRule{} // "" for cluster roles, else the namespace
	roles := map[string]bool{}
	for _, doc := range append(byKind["ClusterRoleBinding"], byKind["RoleBinding"]...) {
		var b rbacv1.RoleBinding
		must(t, yaml.Unmarshal(doc, &b))
		if len(b.Subjects) == 1 && b.Subjects[0].Kind == "Group" && b.Subjects[0].Name == "system:nodes" {
			roles[b.RoleRef.Kind+"/"+b.Namespace+"/"+b.RoleRef.Name] = true
		}
	}
	for _, doc := range append(byKind["ClusterRole"], byKind["Role"]...) {
		var r rbacv1.Role
		must(t, yaml.Unmarshal(doc, &r))
		kind := "ClusterRole"
		if r.Namespace != "" {
			kind = "Role"
		}
		if !roles[kind+"/"+r.Namespace+"/"+r.Name] {
			t.Errorf("%s %s/%s is not bound to system:nodes", kind, r.Namespace, r.Name)
		}
		rules[r.Namespace] = append(rules[r.Namespace], r.Rules...)
	}
	for _, p := range append(append(slices.Clone(FleetPermissions), NodeReaderPermissions...), FleetWorkloadPermissions...) {
		if !grants(rules[p.Namespace], p) {
			t.Errorf("nothing grants %s", p)
		}
	}
	// Nothing beyond: no role grants a verb on a resource outside the
	// rollouts, their status, Leases and Nodes, and get of the
	// controllers a soak reads.
	for ns, rs := range rules {
		for _, r := range rs {
			for _, res := range r.Resources {
				readOnly := (res == "replicasets" || res == "statefulsets") && slices.Equal(r.Verbs, []string{"get"})
				if !readOnly && !slices.Contains([]string{v1alpha1.Resource, v1alpha1.Resource + "/status", v1alpha1.SlotResource, "nodes"}, res) {
					t.Errorf("a role in %q grants %v on %s", ns, r.Verbs, res)
				}
			}
		}
	}
	if grants(rules[""], Permission{Verb: "create", Group: v1alpha1.Group, Resource: v1alpha1.SlotResource}) {
		t.Error("nodes may create slots in every namespace")
	}

	if len(byKind["ValidatingAdmissionPolicy"]) != 1 || len(byKind["ValidatingAdmissionPolicyBinding"]) != 1 {
		t.Errorf("the slot policy and its binding: %d, %d", len(byKind["ValidatingAdmissionPolicy"]), len(byKind["ValidatingAdmissionPolicyBinding"]))
	}
	if grants(rules[v1alpha1.Namespace], Permission{Verb: "delete", Group: v1alpha1.Group, Resource: v1alpha1.SlotResource}) {
		t.Error("nodes may delete slots")
	}
	var fs flowcontrolv1.FlowSchema
	one(t, byKind, "FlowSchema", &fs)
	var pl flowcontrolv1.PriorityLevelConfiguration
	one(t, byKind, "PriorityLevelConfiguration", &pl)
	if fs.Spec.PriorityLevelConfiguration.Name != pl.Name || fs.Spec.MatchingPrecedence >= 500 ||
		fs.Spec.Rules[0].Subjects[0].Group.Name != "system:nodes" {
		t.Errorf("flow schema %+v, priority level %s", fs.Spec, pl.Name)
	}
	// The agents' Node lists and watches leave node-high to the kubelets'
	// heartbeats; no write of a Node or a Lease outside the slots' moves.
	var nodeReads bool
	for _, r := range fs.Spec.Rules[0].ResourceRules {
		for _, res := range r.Resources {
			switch {
			case res == "nodes" && slices.Equal(r.Verbs, []string{"list", "watch"}) && slices.Equal(r.APIGroups, []string{""}):
				nodeReads = true
			case res == "nodes" || res == "nodes/status" || res == "leases":
				t.Errorf("the fleet's flow schema takes %v of %s from the kubelets' level", r.Verbs, res)
			}
		}
	}
	if !nodeReads {
		t.Errorf("the fleet's flow schema does not take the Nodes' lists and watches: %+v", fs.Spec.Rules[0].ResourceRules)
	}
	if !strings.HasPrefix(string(data), "# prepare --fleet\n") {
		t.Errorf("header: %.40q", data)
	}
}

func grants(rules []rbacv1.PolicyRule, p Permission) bool {
	res := p.Resource
	if p.Subresource != "" {
		res += "/" + p.Subresource
	}
	for _, r := range rules {
		if slices.Contains(r.APIGroups, p.Group) && slices.Contains(r.Resources, res) && slices.Contains(r.Verbs, p.Verb) {
			return true
		}
	}
	return false
}

func one(t *testing.T, byKind map[string][][]byte, kind string, into any) {
	t.Helper()
	if len(byKind[kind]) != 1 {
		t.Fatalf("%d %s objects, want 1", len(byKind[kind]), kind)
	}
	must(t, yaml.Unmarshal(byKind[kind][0], into))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
