package clusterprep

import (
	"strings"
	"testing"
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
