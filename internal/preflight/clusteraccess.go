package preflight

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/Azure/aks-flex-node/internal/apiprobe"
	"github.com/Azure/aks-flex-node/internal/clusterprep"
)

// clusterAccessCheck asks the API server, with the credential the kubelet
// will use, who it is (SelfSubjectReview) and whether it may do what the
// kubelet must (SelfSubjectAccessReviews, clusterprep's list): a node
// that joins without them is refused by the cluster after the host has
// changed. Each missing permission is named.
func clusterAccessCheck(e *Env) Check {
	return NewCheck(NameClusterAccess, orNone(e.serverURL()), func(ctx context.Context) Result {
		if e.serverURL() == "" {
			return OK("not checked: %s is empty in %s", fqdnKey, e.configFile())
		}
		token, who, perms, remedy, res := e.accessCredential(ctx)
		if res != nil {
			return *res
		}
		c, err := e.apiClient()
		if err != nil {
			return Warning(fmt.Sprintf("fix %s first", NameAPIServerReachable), "%s not checked: %v", who, err)
		}
		code, user, err := c.SelfSubjectReview(ctx, token)
		switch {
		case err != nil && code == 0:
			return Warning(fmt.Sprintf("fix %s first", NameAPIServerReachable), "%s not checked: %v", who, e.redactCredential(err))
		case code == http.StatusUnauthorized:
			return Error(fmt.Sprintf("configure the cluster to accept %s (for Entra: its issuer and the audience %s)", who, audienceHint), "the API server at %s rejected %s (401): it does not authenticate it", e.serverURL(), who)
		case code/100 == 2:
			who = fmt.Sprintf("%s, which the cluster sees as %q (groups %s)", who, user.Username, strings.Join(user.Groups, ", "))
		}
		var missing []string
		for _, p := range perms {
			code, allowed, _, err := c.SelfSubjectAccessReview(ctx, token, apiprobe.ResourceAttributes{Namespace: p.Namespace, Verb: p.Verb, Group: p.Group, Resource: p.Resource, Subresource: p.Subresource})
			if err != nil || code/100 != 2 {
				return Warning("check the API server's health", "%s: cannot ask whether it may %s: answer %d %v", who, p, code, e.redactCredential(err))
			}
			if !allowed {
				missing = append(missing, p.String())
			}
		}
		if len(missing) > 0 {
			return Error(remedy(user.Username), "%s may not %s: the node needs each of these (its kubelet, and kube-proxy when the agent runs it)", who, strings.Join(missing, ", "))
		}
		return OK("%s may do all %d things the node needs", who, len(perms))
	})
}

// audienceHint names the audience the cluster must accept.
const audienceHint = "6dae42f8-4368-4678-94ff-3960e28e3630"

// accessCredential is the credential cluster-access asks with, who it is
// for messages, what it must be allowed, and how to grant it; res is set
// when there is nothing to ask with.
func (e *Env) accessCredential(ctx context.Context) (token, who string, perms []clusterprep.Permission, remedy func(string) string, res *Result) {
	if id, tok, ok := e.tokenID(); ok {
		remedy = func(string) string {
			return fmt.Sprintf("grant the token's group the TLS bootstrap roles: `aks-flex-node cluster prepare --bootstrap-token` prints a token and the bindings for its group (%s) to apply with kubectl", clusterprep.BootstrapGroup)
		}
		return tok, "bootstrap token " + id, clusterprep.BootstrapTokenPermissions, remedy, nil
	}
	s, tok, ok, err := e.identityToken(ctx)
	switch {
	case !ok && err == nil:
		r := OK("not checked: no credential in %s", e.configFile())
		return "", "", nil, nil, &r
	case err != nil:
		r := Warning(fmt.Sprintf("fix %s first", NameIdentity), "not checked: no token for the identity (see %s)", NameIdentity)
		return "", "", nil, nil, &r
	}
	remedy = func(user string) string {
		if user == "" {
			user = "<object ID>"
		}
		return fmt.Sprintf("bind the identity to the system:node role: aks-flex-node cluster prepare --identity %s | kubectl apply -f -", user)
	}
	perms = clusterprep.KubeletPermissions
	if e.Config.Networking.AgentKubeProxy() {
		perms = append(slices.Clip(perms), clusterprep.KubeProxyPermissions...)
	}
	return tok.AccessToken, s.String(), perms, remedy, nil
}

// redactCredential keeps the bootstrap token's secret out of a message
// (an identity token never appears in a transport error).
func (e *Env) redactCredential(err error) string {
	if err == nil {
		return ""
	}
	if _, tok, ok := e.tokenID(); ok {
		return redact(err, tok)
	}
	return err.Error()
}
