package clusterprep

import (
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
)

func TestPermissionString(t *testing.T) {
	for p, want := range map[Permission]string{
		{Verb: "create", Resource: "nodes"}:                                                                               "create nodes",
		{Verb: "patch", Resource: "nodes", Subresource: "status"}:                                                         "patch nodes/status",
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease"}:                  "update leases.coordination.k8s.io in kube-node-lease",
		{Verb: "create", Group: "certificates.k8s.io", Resource: "certificatesigningrequests", Subresource: "nodeclient"}: "create certificatesigningrequests.certificates.k8s.io/nodeclient",
	} {
		if got := p.String(); got != want {
			t.Errorf("%+v: %q, want %q", p, got, want)
		}
	}
}

func TestBootstrapTokens(t *testing.T) {
	seen := map[string]bool{}
	for range 20 {
		tok, err := NewBootstrapToken()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseBootstrapToken(tok.String()); err != nil || seen[tok.ID] {
			t.Fatalf("%s: %v (seen %v)", tok.ID, err, seen[tok.ID])
		}
		seen[tok.ID] = true
	}
	for _, bad := range []string{"", "abcdef", "ABCDEF.0123456789abcdef", "abcdef.0123456789abcde", "abcdef:0123456789abcdef"} {
		if _, err := ParseBootstrapToken(bad); err == nil {
			t.Errorf("%q parsed", bad)
		} else if strings.Contains(err.Error(), "0123456789") {
			t.Errorf("error echoes the secret: %v", err)
		}
	}
}

// The bootstrap-token objects let every node with a certificate read the
// Nodes (the agent's routes to the other nodes' pods), and nothing more.
func TestBootstrapTokenObjectsLetNodesReadNodes(t *testing.T) {
	var role, bound bool
	for _, o := range BootstrapTokenObjects(BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef"}, time.Now()) {
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			if o.Name != NodeReaderRole || len(o.Rules) != 1 || strings.Join(o.Rules[0].Resources, ",") != "nodes" ||
				strings.Join(o.Rules[0].Verbs, ",") != "get,list,watch" {
				t.Errorf("role %+v", o)
			}
			for _, p := range NodeReaderPermissions {
				if !slices.Contains(o.Rules[0].Verbs, p.Verb) || p.Resource != "nodes" {
					t.Errorf("the role does not grant %s", p)
				}
			}
			role = true
		case *rbacv1.ClusterRoleBinding:
			if o.RoleRef.Name == NodeReaderRole {
				bound = len(o.Subjects) == 1 && o.Subjects[0].Kind == "Group" && o.Subjects[0].Name == "system:nodes"
			}
		}
	}
	if !role || !bound {
		t.Fatalf("role %v, bound to system:nodes %v", role, bound)
	}
}

// TestIdentityNodeIsOnlyANode (issue 26 item 1): what `cluster prepare
// --identity` prints grants the identity nothing but creating and watching
// the CSR for a node's client certificate and having it approved (the
// bootstrap token's grants); no binding names the system:node role, which
// outside the Node authorizer grants its rules cluster-wide. The bindings
// every node needs are for the group system:nodes, the same objects the
// bootstrap-token output has.
func TestIdentityNodeIsOnlyANode(t *testing.T) {
	const oid = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
	objs := IdentityObjects(oid)
	var toIdentity []string
	for _, o := range objs {
		b, ok := o.(*rbacv1.ClusterRoleBinding)
		if !ok {
			if r, ok := o.(*rbacv1.ClusterRole); !ok || r.Name != NodeReaderRole {
				t.Errorf("unexpected object %T %+v", o, o)
			}
			continue
		}
		if b.RoleRef.Name == "system:node" {
			t.Errorf("binding %s grants the system:node role", b.Name)
		}
		for _, s := range b.Subjects {
			switch {
			case s.Kind == rbacv1.UserKind && s.Name == oid:
				toIdentity = append(toIdentity, b.RoleRef.Name)
			case s.Kind == rbacv1.GroupKind && s.Name == "system:nodes":
			default:
				t.Errorf("binding %s names %s %s: want the identity or system:nodes only", b.Name, s.Kind, s.Name)
			}
		}
	}
	slices.Sort(toIdentity)
	if want := []string{nodeClientRole, nodeBootstrapperRole}; !slices.Equal(toIdentity, want) {
		t.Errorf("the identity is bound to %v, want %v only", toIdentity, want)
	}
	// The node-level objects are the bootstrap token's, by name and role.
	tokenObjs := BootstrapTokenObjects(BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef"}, time.Now())
	nodeLevel := func(objs []any) (names []string) {
		for _, o := range objs {
			if b, ok := o.(*rbacv1.ClusterRoleBinding); ok && len(b.Subjects) == 1 && b.Subjects[0].Name == "system:nodes" {
				names = append(names, b.Name+"="+b.RoleRef.Name)
			}
		}
		return names
	}
	if a, b := nodeLevel(objs), nodeLevel(tokenObjs); !slices.Equal(a, b) || !slices.Contains(a, "aks-flex-node:node-autoapprove-certificate-rotation="+selfNodeClientRole) {
		t.Errorf("node-level bindings: identity %v, token %v; want the same, renewal among them", a, b)
	}
	data, err := Render("header", objs)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "name: system:node\n") {
		t.Errorf("rendered output binds system:node:\n%s", data)
	}
	// What preflight asks of the identity is exactly what these grant.
	if !slices.Equal(IdentityPermissions, BootstrapTokenPermissions) {
		t.Errorf("identity permissions %v", IdentityPermissions)
	}
}
