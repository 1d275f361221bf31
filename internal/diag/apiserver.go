package diag

import (
	"context"
	"net/http"
	"strings"

	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/preflight"
)

// checkAPIServer: the API server answers the node's own credential and
// says it is this node.
func checkAPIServer(e *Env) preflight.Check {
	return preflight.NewCheck(NameAPIServer, "the config's API server, as the kubelet's client certificate "+node.KubeletClientCert, func(ctx context.Context) preflight.Result {
		p := e.apiServer(ctx)
		want := "system:node:" + e.nodeName()
		switch {
		case p.credErr != nil:
			return preflight.Error("the config names the API server and its CA (node.kubelet.clusterFQDN, caCertData: debug needs a readable config) and the machine holds the kubelet's client certificate; if that is missing, aks-flex-node reset, then aks-flex-node start with a valid bootstrap token, makes it again",
				"the node's credential: %v", p.credErr)
		case p.ssrErr != nil && p.ssrCode != 0:
			return preflight.Error("check that "+p.server+" is a Kubernetes API server (1.28 or later)", "%s answered, but %v", p.server, p.ssrErr)
		case p.ssrErr != nil:
			return preflight.Error("check the path from this host to "+p.server+" (the machine uses the host's network): DNS, routes, firewalls and proxies; aks-flex-node preflight checks it the same way",
				"%s is unreachable: %v", p.server, p.ssrErr)
		case p.ssrCode == http.StatusUnauthorized:
			return preflight.Error("the server rejects the node's credential: see client-certificate (expired, not yet valid, or not from this cluster's CA)",
				"%s rejected the node's credential (401 Unauthorized)", p.server)
		case p.ssrCode/100 != 2:
			return preflight.Error("the server refused a SelfSubjectReview; check the API server's health and its authentication webhook",
				"%s answered %d to a SelfSubjectReview", p.server, p.ssrCode)
		case p.user != want:
			return preflight.Error("the kubelet's certificate is not this node's: aks-flex-node reset, then aks-flex-node start",
				"%s says the node's credential is %q (groups %s), not %s", p.server, p.user, strings.Join(p.groups, ","), want)
		}
		return preflight.OK("%s authenticated the node as %s (groups %s) in %s", p.server, p.user, strings.Join(p.groups, ","), p.received.Sub(p.sent).Round(1e6))
	})
}
