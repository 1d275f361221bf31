package fakeentra

import (
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Handler serves the tenant's endpoints.
func (tn *Tenant) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{tenant}/v2.0/.well-known/openid-configuration", tn.discovery)
	mux.HandleFunc("GET /{tenant}/discovery/v2.0/keys", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, tn.jwks())
	})
	mux.HandleFunc("POST /{tenant}/oauth2/v2.0/token", tn.token)
	return mux
}

func (tn *Tenant) discovery(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("tenant") != tn.ID {
		oauthError(w, http.StatusBadRequest, "invalid_tenant", 90002, fmt.Sprintf("Tenant '%s' not found.", r.PathValue("tenant")))
		return
	}
	base := strings.TrimSuffix(tn.AuthorityHost, "/") + "/" + tn.ID
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                tn.Issuer,
		"authorization_endpoint":                base + "/oauth2/v2.0/authorize",
		"token_endpoint":                        base + "/oauth2/v2.0/token",
		"jwks_uri":                              base + "/discovery/v2.0/keys",
		"response_types_supported":              []string{"code", "id_token", "token"},
		"subject_types_supported":               []string{"pairwise"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_post", "private_key_jwt"},
	})
}

const assertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// token is the client_credentials grant. Error bodies are Entra's:
// error, error_description starting with the AADSTS code, error_codes.
func (tn *Tenant) token(w http.ResponseWriter, r *http.Request) {
	tn.requests.Add(1)
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", 900144, "The request body must contain the following parameter: 'grant_type'.")
		return
	}
	f := r.PostForm
	// MSAL adds the OIDC scopes to every request; Entra ignores them in a
	// client credentials grant. One resource's /.default must be there.
	resource := ""
	for _, sc := range strings.Fields(f.Get("scope")) {
		switch {
		case strings.HasSuffix(sc, "/.default") && resource == "":
			resource = strings.TrimSuffix(sc, "/.default")
		case sc == "openid", sc == "offline_access", sc == "profile":
		default:
			resource = ""
		}
	}
	switch {
	case r.PathValue("tenant") != tn.ID:
		oauthError(w, http.StatusBadRequest, "invalid_request", 90002, fmt.Sprintf("Tenant '%s' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud.", r.PathValue("tenant")))
		return
	case f.Get("grant_type") != "client_credentials":
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", 70003, "The app requested an unsupported grant type '"+f.Get("grant_type")+"'.")
		return
	case resource == "":
		oauthError(w, http.StatusBadRequest, "invalid_scope", 1002012, "The provided value for scope "+f.Get("scope")+" is not valid. Client credential flows must have a scope value with /.default suffixed to the resource identifier (application ID URI).")
		return
	}
	appID := f.Get("client_id")
	c, ok := tn.client(appID)
	if !ok {
		oauthError(w, http.StatusBadRequest, "unauthorized_client", 700016, fmt.Sprintf("Application with identifier '%s' was not found in the directory '%s'. This can happen if the application has not been installed by the administrator of the tenant or consented to by any user in the tenant. You may have sent your authentication request to the wrong tenant.", appID, tn.ID))
		return
	}
	switch {
	case f.Get("client_secret") != "":
		if c.Secret == "" || f.Get("client_secret") != c.Secret {
			oauthError(w, http.StatusUnauthorized, "invalid_client", 7000215, "Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app '"+appID+"'.")
			return
		}
	case f.Get("client_assertion_type") == assertionType:
		if msg, code := tn.checkAssertion(c, f.Get("client_assertion"), r); msg != "" {
			oauthError(w, http.StatusUnauthorized, "invalid_client", code, msg)
			return
		}
	default:
		oauthError(w, http.StatusUnauthorized, "invalid_client", 7000216, "'client_assertion', 'client_secret' or 'request' is required for the 'client_credentials' grant type.")
		return
	}
	tok, exp, err := tn.Mint(appID, resource)
	if err != nil {
		oauthError(w, http.StatusInternalServerError, "server_error", 50000, err.Error())
		return
	}
	secs := int(time.Until(exp).Seconds())
	writeJSON(w, http.StatusOK, map[string]any{"token_type": "Bearer", "expires_in": secs, "ext_expires_in": secs, "access_token": tok})
}

// checkAssertion verifies a client assertion the way Entra does: signed
// by the key of the certificate registered for the client (named by its
// thumbprint), for this token endpoint, by and about the client, unexpired.
func (tn *Tenant) checkAssertion(c Client, assertion string, r *http.Request) (msg string, code int) {
	if c.Cert == nil {
		return "The client has no certificate credential registered. Client assertion failed signature validation.", 700027
	}
	j, err := parseJWS(assertion)
	if err != nil {
		return "Client assertion is not a valid JWT: " + err.Error(), 50027
	}
	thumb := sha256.Sum256(c.Cert.Raw)
	if got, _ := j.header["x5t#S256"].(string); got != "" && got != base64.StdEncoding.EncodeToString(thumb[:]) {
		return "Client assertion contains an invalid signature. [Reason - The key was not found., Thumbprint of key used by client: '" + got + "']", 700027
	}
	pub, ok := c.Cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return "The registered certificate's key is not RSA.", 700027
	}
	if err := j.verify(pub); err != nil {
		return "Client assertion failed signature validation.", 700027
	}
	endpoint := strings.TrimSuffix(tn.AuthorityHost, "/") + r.URL.Path
	switch {
	case j.claim("aud") != endpoint:
		return fmt.Sprintf("The audience '%s' of the client assertion does not match the token endpoint '%s'.", j.claim("aud"), endpoint), 700212
	case j.claim("iss") != c.AppID || j.claim("sub") != c.AppID:
		return "The issuer and subject of the client assertion must be the client ID.", 700023
	case time.Unix(j.numClaim("exp"), 0).Before(time.Now()):
		return "The provided client assertion is expired.", 700024
	}
	return "", 0
}

func oauthError(w http.ResponseWriter, status int, kind string, code int, desc string) {
	writeJSON(w, status, map[string]any{
		"error":             kind,
		"error_description": fmt.Sprintf("AADSTS%d: %s\r\nTrace ID: 00000000-0000-0000-0000-000000000000\r\nCorrelation ID: 00000000-0000-0000-0000-000000000000\r\nTimestamp: %s", code, desc, time.Now().UTC().Format("2006-01-02 15:04:05Z")),
		"error_codes":       []int{code},
		"timestamp":         time.Now().UTC().Format("2006-01-02 15:04:05Z"),
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
