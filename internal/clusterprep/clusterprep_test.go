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
