package preflight

import (
	"context"
	"fmt"
	"net/http"
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
			return Error(remedy(user.Username), "%s may not %s: the kubelet's TLS bootstrap needs each of these", who, strings.Join(missing, ", "))
		}
		if _, _, isToken := e.tokenID(); !isToken {
			excess, err := beyondBootstrap(ctx, c, token)
			if err != nil {
				return Warning("check the API server's health", "%s: %v", who, e.redactCredential(err))
			}
			if len(excess) > 0 {
				return Error(excessRemedy(user.Username), "%s may %s: more than a node may; a host holding it could act beyond its node", who, strings.Join(excess, ", "))
			}
			return OK("%s may do all %d things the kubelet's TLS bootstrap needs, and none of %d a node must not", who, len(perms), len(clusterprep.BeyondBootstrap))
		}
		return OK("%s may do all %d things the kubelet's TLS bootstrap needs", who, len(perms))
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
		return fmt.Sprintf("let the identity bootstrap the kubelet's certificate: aks-flex-node cluster prepare --identity %s | kubectl apply -f -", objectIDOr(user))
	}
	return tok.AccessToken, s.String(), clusterprep.IdentityPermissions, remedy, nil
}

func objectIDOr(user string) string {
	if user == "" {
		return "<object ID>"
	}
	return user
}

// beyondBootstrap asks whether an Entra identity may do what only a
// bootstrap must not (clusterprep.BeyondBootstrap) and names each it may:
// the kubelet and the agent act as the node once it has its certificate,
// but the identity's token is on the host too, and one bound more widely
// (as an earlier version bound it to system:node, cluster-wide outside the
// Node authorizer) gives a compromised host more than a node's powers.
func beyondBootstrap(ctx context.Context, c *apiprobe.Client, token string) (excess []string, err error) {
	for _, p := range clusterprep.BeyondBootstrap {
		code, allowed, _, err := c.SelfSubjectAccessReview(ctx, token, apiprobe.ResourceAttributes{Namespace: p.Namespace, Verb: p.Verb, Group: p.Group, Resource: p.Resource, Subresource: p.Subresource})
		if err != nil || code/100 != 2 {
			return nil, fmt.Errorf("cannot ask whether it may %s: answer %d %v", p, code, err)
		}
		if allowed {
			excess = append(excess, p.String())
		}
	}
	return excess, nil
}

// excessRemedy is how to take the identity's extra powers away.
func excessRemedy(user string) string {
	id := objectIDOr(user)
	return fmt.Sprintf("remove every binding of the identity but cluster prepare's: an earlier version bound it to system:node (kubectl delete clusterrolebinding aks-flex-node:node:%s aks-flex-node:node-proxier:%s); `kubectl get clusterrolebindings,rolebindings -A -o wide | grep %s` lists them. Nodes joined by that version sign in as the identity until they run start again: apply `cluster prepare --identity %s`, run start on each with --ignore-preflight-errors %s, then remove the bindings", id, id, id, id, NameClusterAccess)
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
