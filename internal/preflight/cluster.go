package preflight

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/apiprobe"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/machineapi"
	"github.com/Azure/aks-flex-node/internal/state"
)

// APITimeout bounds each request preflight makes to the API server.
const APITimeout = 10 * time.Second

const (
	caKey    = "node.kubelet.caCertData"
	fqdnKey  = "node.kubelet.clusterFQDN"
	tokenKey = "azure.bootstrapToken.token"
)

// serverURL is the API server URL from the config ("" when not set; the
// config requires it, so only a config validation skipped leaves it so).
func (e *Env) serverURL() string {
	u := e.Config.Node.Kubelet.ClusterFQDN
	if u == "" {
		return ""
	}
	if s, err := config.ServerURL(u); err == nil {
		return s
	}
	return u
}

// apiClient is the apiprobe client for the configured server, made once
// per Env (the checks run concurrently): it trusts exactly
// node.kubelet.caCertData, as the kubelet will, or the system trust store
// when that is empty.
func (e *Env) apiClient() (*apiprobe.Client, error) {
	e.apiOnce.Do(func() {
		if e.Config.Node.Kubelet.CACertData == "" {
			e.api = apiprobe.NewSystemTrust(e.serverURL(), APITimeout)
			return
		}
		e.api, e.apiErr = apiprobe.New(e.serverURL(), e.Config.CAPEM(), APITimeout)
		if e.apiErr != nil {
			e.apiErr = fmt.Errorf("%s in %s: %w", caKey, e.configFile(), e.apiErr)
		}
	})
	return e.api, e.apiErr
}

// apiRequest sends one request through the Env's client.
func (e *Env) apiRequest(ctx context.Context, method, p, bearer string, body []byte) (int, []byte, error) {
	c, err := e.apiClient()
	if err != nil {
		return 0, nil, err
	}
	return c.Do(ctx, method, p, bearer, body)
}

// transportFailure turns a failed request into a result that names the URL
// and says whether the CA, the name, or the network is at fault.
func (e *Env) transportFailure(u string, err error) Result {
	cfg := e.configFile()
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verr *tls.CertificateVerificationError
	var netErr net.Error
	switch {
	case errors.As(err, &unknownCA):
		return Error(fmt.Sprintf("set %s in %s to the cluster's CA (base64 of its PEM; the certificate-authority-data of the cluster's kubeconfig)", caKey, cfg),
			"TLS to %s failed: the configured CA does not match: the server's certificate is not signed by the CA in %s (%s): %v", u, caKey, cfg, err)
	case errors.As(err, &hostErr):
		return Error(fmt.Sprintf("set %s in %s to a name the API server's certificate is issued for", fqdnKey, cfg),
			"TLS to %s failed: the server's certificate is not valid for that name: %v", u, err)
	case errors.As(err, &invalid), errors.As(err, &verr):
		return Error(fmt.Sprintf("check %s and %s in %s, and the host clock", caKey, fqdnKey, cfg),
			"TLS to %s failed: the server's certificate did not verify against the CA in %s: %v", u, caKey, err)
	case errors.As(err, &netErr) && netErr.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return Error(fmt.Sprintf("check %s in %s, DNS, routes and firewalls between this host and the API server", fqdnKey, cfg),
			"cannot reach the API server at %s: no answer within %s: %v", u, APITimeout, err)
	}
	return Error(fmt.Sprintf("check %s in %s, DNS, routes and firewalls between this host and the API server", fqdnKey, cfg),
		"cannot reach the API server at %s: %v", u, err)
}

func apiServerReachableCheck(e *Env) Check {
	return NewCheck(NameAPIServerReachable, orNone(e.serverURL()), func(ctx context.Context) Result {
		base := e.serverURL()
		if base == "" {
			return OK("not configured: %s is empty in %s", fqdnKey, e.configFile())
		}
		u := base + "/version"
		code, body, err := e.apiRequest(ctx, http.MethodGet, "/version", "", nil)
		if err != nil {
			return e.transportFailure(u, err)
		}
		// Any HTTP answer over verified TLS proves the name, the route and
		// the CA; whether anonymous requests may read /version is policy.
		trust := "the CA in " + caKey
		if e.Config.Node.Kubelet.CACertData == "" {
			trust = "the system trust store (" + caKey + " is empty)"
		}
		msg := fmt.Sprintf("%s answered %d over TLS verified with %s", u, code, trust)
		var v struct {
			GitVersion string `json:"gitVersion"`
		}
		if code == http.StatusOK && json.Unmarshal(body, &v) == nil && v.GitVersion != "" {
			msg += ", Kubernetes " + v.GitVersion
		}
		return OK("%s", msg)
	})
}

// tokenID is the public half of a bootstrap token; the secret half never
// appears in output.
func (e *Env) tokenID() (id, token string, ok bool) {
	bt := e.Config.Azure.BootstrapToken
	if bt == nil || bt.Token == "" {
		return "", "", false
	}
	id, _, _ = strings.Cut(bt.Token, ".")
	return id, bt.Token, true
}

func bootstrapTokenCheck(e *Env) Check {
	target := tokenKey
	if id, _, ok := e.tokenID(); ok {
		target = fmt.Sprintf("%s (token id %s)", tokenKey, id)
	}
	return NewCheck(NameBootstrapToken, target, func(ctx context.Context) Result {
		id, token, ok := e.tokenID()
		if !ok {
			return OK("not configured: no %s in %s", tokenKey, e.configFile())
		}
		if e.serverURL() == "" {
			return OK("token id %s not verified: %s is empty in %s", id, fqdnKey, e.configFile())
		}
		u := e.serverURL() + apiprobe.SelfSubjectReviewPath
		c, err := e.apiClient()
		code := 0
		var user apiprobe.UserInfo
		if err == nil {
			code, user, err = c.SelfSubjectReview(ctx, token)
		}
		if err != nil && code == 0 {
			return Warning(fmt.Sprintf("fix %s first", NameAPIServerReachable),
				"bootstrap token %s not verified: POST %s failed: %v", id, u, redact(err, token))
		}
		want := "system:bootstrap:" + id
		replace := fmt.Sprintf("create a bootstrap token in the cluster (kubeadm token create, or a bootstrap-token-%s Secret in kube-system) and set %s in %s", id, tokenKey, e.configFile())
		switch code {
		case http.StatusCreated, http.StatusOK:
			if err != nil {
				return Warning("check that "+e.serverURL()+" is a Kubernetes API server", "bootstrap token %s: cannot read the SelfSubjectReview answer from %s: %v", id, u, err)
			}
			if user.Username != want {
				return Error(replace, "the API server authenticated the token from %s as %q, not %q: it is not the bootstrap token %s", tokenKey, user.Username, want, id)
			}
			return OK("the API server authenticates the bootstrap token %s as %s", id, user.Username)
		case http.StatusUnauthorized:
			return Error(replace, "the API server rejected the bootstrap token %s (401 from POST %s): it is unknown, expired or its secret does not match", id, u)
		case http.StatusForbidden:
			// 403 comes after authentication: the token is valid, only
			// the review itself is not allowed.
			return OK("the API server accepts the bootstrap token %s (403 from POST %s: authenticated, but not allowed to review itself, so the username was not confirmed)", id, u)
		case http.StatusNotFound:
			return Warning("nothing, if the API server is older than Kubernetes 1.28; the token is checked again when the kubelet joins",
				"bootstrap token %s not verified: %s does not serve SelfSubjectReview (404)", id, e.serverURL())
		}
		return Warning("check the API server's health", "bootstrap token %s not verified: POST %s answered %d", id, u, code)
	})
}

// redact keeps the token secret out of an error that might quote a request.
func redact(err error, token string) string {
	s := err.Error()
	if _, secret, ok := strings.Cut(token, "."); ok && secret != "" {
		s = strings.ReplaceAll(s, secret, "<redacted>")
	}
	return s
}

// readCredential is the join credential the read-only questions ask
// with: the bootstrap token, or a token for the Azure identity.
func (e *Env) readCredential(ctx context.Context) (string, bool) {
	if _, token, ok := e.tokenID(); ok {
		return token, true
	}
	if _, tok, isID, err := e.identityToken(ctx); isID && err == nil {
		return tok.AccessToken, true
	}
	return "", false
}

// nodeNameCheck is best-effort: the name's syntax was validated when the
// config was loaded, and whether a Node of that name exists is only
// answered when the bootstrap token may read Nodes. Every "cannot tell"
// is OK with a note, never a failure.
func nodeNameCheck(e *Env) Check {
	name := e.Config.Agent.NodeName
	return NewCheck(NameNodeName, fmt.Sprintf("agent.nodeName %s", name), func(ctx context.Context) Result {
		valid := fmt.Sprintf("%s is a valid DNS-1123 name", name)
		if e.Config.HasMachine() {
			// It names the AKS Machine too, whose rule is narrower.
			if err := machineapi.CheckMachineName(name); err != nil {
				return Error(fmt.Sprintf("set agent.nodeName in %s to at most %d characters without dots", e.configFile(), machineapi.MaxMachineNameLength),
					"%v (the node registers as that AKS Machine)", err)
			}
			valid += " and AKS Machine name"
		}
		token, ok := e.readCredential(ctx)
		switch {
		case e.serverURL() == "":
			return OK("%s; whether a Node of that name exists is not checked: %s is empty", valid, fqdnKey)
		case !ok:
			return OK("%s; whether a Node of that name exists is not checked: no credential to ask with", valid)
		}
		p := "/api/v1/nodes/" + url.PathEscape(name)
		code, _, err := e.apiRequest(ctx, http.MethodGet, p, token, nil)
		if err != nil {
			return OK("%s; cannot tell whether a Node of that name exists: GET %s%s: %s (see %s)", valid, e.serverURL(), p, redact(err, token), NameAPIServerReachable)
		}
		switch code {
		case http.StatusOK:
			if a, err := state.Open(e.Layout).Applied(); err == nil && a != nil && a.NodeName == name {
				return OK("%s; the Node of that name is this host's: it joined as %s (state in %s)", valid, name, e.Layout.StateDir())
			}
			return Warning(fmt.Sprintf("if that Node is an earlier incarnation of this host, delete it (kubectl delete node %s); otherwise set a different agent.nodeName in %s", name, e.configFile()),
				"a Node named %s already exists in the cluster at %s: joining would take it over", name, e.serverURL())
		case http.StatusNotFound:
			return OK("%s; no Node of that name exists yet", valid)
		case http.StatusForbidden:
			return OK("%s; cannot tell whether a Node of that name exists: the credential may not read Nodes (403)", valid)
		case http.StatusUnauthorized:
			return OK("%s; cannot tell whether a Node of that name exists: the token was rejected (see %s)", valid, NameBootstrapToken)
		}
		return OK("%s; cannot tell whether a Node of that name exists: GET %s%s answered %d", valid, e.serverURL(), p, code)
	})
}
