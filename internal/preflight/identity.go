package preflight

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/identity"
)

// identityToken gets a token for the config's identity once per Env (the
// identity and cluster-access checks run concurrently and share it),
// straight from the endpoint: preflight writes no cache. ok is false when
// the config joins with a bootstrap token.
func (e *Env) identityToken(ctx context.Context) (spec identity.Spec, tok identity.Token, ok bool, err error) {
	e.idOnce.Do(func() {
		s, isID, err := identity.FromConfig(e.Config, identity.ReadSecretFile(e.Root))
		e.idSpec, e.idOK = s, isID
		if err == nil && isID {
			err = identity.CheckConfigFile(e.configFile(), e.Config.Azure.ServicePrincipal)
		}
		if err != nil || !isID {
			e.idErr = err
			return
		}
		fetch := e.FetchToken
		if fetch == nil {
			fetch = func(ctx context.Context, s identity.Spec) (identity.Token, error) {
				return identity.Fetch(ctx, s, identity.AKSServerID, identity.Options{})
			}
		}
		e.idToken, e.idErr = fetch(ctx, s)
	})
	return e.idSpec, e.idToken, e.idOK, e.idErr
}

// tokenClaims reads the claims of an access token without verifying it
// (the API server does that): who the identity platform says it is.
func tokenClaims(tok string) map[string]any {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil
	}
	var c map[string]any
	if json.Unmarshal(raw, &c) != nil {
		return nil
	}
	return c
}

func identityCheck(e *Env) Check {
	return NewCheck(NameIdentity, "azure identity", func(ctx context.Context) Result {
		s, tok, ok, err := e.identityToken(ctx)
		if !ok && err == nil {
			return OK("not configured: the node joins with azure.bootstrapToken")
		}
		if err != nil {
			return identityFailure(e, s, err)
		}
		msg := fmt.Sprintf("got a token for %s from %s", identity.AKSServerID, s)
		if c := tokenClaims(tok.AccessToken); c != nil {
			msg += fmt.Sprintf(": tenant %v, object %v", c["tid"], c["oid"])
			if app, ok := c["appid"]; ok {
				msg += fmt.Sprintf(", client %v", app)
			}
		}
		return OK("%s, valid for %s", msg, time.Until(tok.ExpiresOn).Round(time.Minute))
	})
}

// identityFailure says what to do about a failed token request, by what
// the endpoint answered.
func identityFailure(e *Env, s identity.Spec, err error) Result {
	cfg := e.configFile()
	var fe *identity.FetchError
	code := ""
	if errors.As(err, &fe) {
		code = fe.Code
	}
	remedy := fmt.Sprintf("check the identity in %s and that this host can reach %s", cfg, s.Endpoint())
	switch {
	case errors.Is(err, identity.ErrLooseSecretFile):
		remedy = "make the file mode 0600 and owned by root (the message names it)"
	case code == "AADSTS7000215":
		remedy = fmt.Sprintf("set azure.servicePrincipal.clientSecret in %s to a current secret's value (not its ID) for client %s", cfg, s.ClientID)
	case code == "AADSTS700016":
		remedy = fmt.Sprintf("check azure.servicePrincipal.clientId and tenantId in %s: the tenant has no application %s", cfg, s.ClientID)
	case code == "AADSTS700027":
		remedy = fmt.Sprintf("upload the certificate in %s to application %s, or point clientCertificatePath at the one it has", s.CertificatePath, s.ClientID)
	case s.Method == identity.MethodManagedIdentity && fe != nil && strings.Contains(fe.Detail, "Identity not found"):
		remedy = fmt.Sprintf("assign the managed identity to this VM, or fix azure.managedIdentity.clientId in %s", cfg)
	case s.Method == identity.MethodManagedIdentity && fe != nil:
		remedy = "IMDS answers only on an Azure VM: outside Azure use azure.servicePrincipal, or azure.arc on an Arc-connected host"
	case s.Method == identity.MethodArc && fe != nil:
		remedy = "connect this host to Azure Arc (azcmagent connect) and check that the himds service runs"
	}
	return Error(remedy, "%v", err)
}
