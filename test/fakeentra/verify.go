package fakeentra

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Verify checks an access token as a resource server of the tenant does
// (ARM, for test/fakearm): signed by the tenant's key, its issuer and
// tenant, for audience (a trailing slash is not significant, as Entra's
// resource URIs have it either way), and within its lifetime. It returns
// the token's appid and oid.
func (tn *Tenant) Verify(token, audience string) (appID, objectID string, err error) {
	j, err := parseJWS(token)
	if err != nil {
		return "", "", err
	}
	if kid, _ := j.header["kid"].(string); kid != tn.kid {
		return "", "", fmt.Errorf("signed with key %q, not the tenant's", kid)
	}
	if err := j.verify(&tn.key.PublicKey); err != nil {
		return "", "", fmt.Errorf("signature: %w", err)
	}
	now := time.Now().Unix()
	switch {
	case j.claim("iss") != tn.Issuer:
		return "", "", fmt.Errorf("issuer %q is not %q", j.claim("iss"), tn.Issuer)
	case j.claim("tid") != tn.ID:
		return "", "", fmt.Errorf("tenant %q is not %q", j.claim("tid"), tn.ID)
	case strings.TrimRight(j.claim("aud"), "/") != strings.TrimRight(audience, "/"):
		return "", "", fmt.Errorf("audience %q is not %q", j.claim("aud"), audience)
	case j.numClaim("exp") < now:
		return "", "", errors.New("the token has expired")
	case j.numClaim("nbf") > now+300:
		return "", "", errors.New("the token is not valid yet")
	}
	return j.claim("appid"), j.claim("oid"), nil
}
