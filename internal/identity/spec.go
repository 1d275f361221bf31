package identity

import (
	"fmt"
	"strings"

	"github.com/Azure/aks-flex-node/internal/config"
)

// Methods, as the config names them.
const (
	MethodManagedIdentity  = config.MethodManagedIdentity
	MethodServicePrincipal = config.MethodServicePrincipal
	MethodArc              = config.MethodArc
)

// AKSServerID is the application ID of the AKS AAD server, the audience
// of every token an AKS cluster with Entra integration accepts.
const AKSServerID = "6dae42f8-4368-4678-94ff-3960e28e3630"

// Endpoints the identity platform serves that are not configurable.
const (
	// IMDSTokenEndpoint is where a managed identity's token comes from
	// (azidentity asks it; this is for messages).
	IMDSTokenEndpoint = "http://169.254.169.254/metadata/identity/oauth2/token"
	// ArcTokenEndpoint is the Azure Arc agent's local identity endpoint;
	// IDENTITY_ENDPOINT overrides it, as it does for the Arc agent.
	ArcTokenEndpoint = "http://localhost:40342/metadata/identity/oauth2/token"
	// ArcKeyDir is where the Arc agent writes the key its challenge names.
	ArcKeyDir = "/var/opt/azcmagent/tokens"
)

// authorityHosts are the Entra authorities of the clouds azure.cloud names.
var authorityHosts = map[string]string{
	"AzurePublicCloud":       "https://login.microsoftonline.com/",
	"AzureChinaCloud":        "https://login.chinacloudapi.cn/",
	"AzureUSGovernmentCloud": "https://login.microsoftonline.us/",
}

// Spec is one identity, resolved from the config: everything a token
// request needs. Secret fields are marked; String never shows them.
type Spec struct {
	Method   string `json:"method"`
	TenantID string `json:"tenantId,omitempty"`
	// ClientID is the service principal's application ID or a
	// user-assigned managed identity's client ID ("" is the
	// system-assigned identity).
	ClientID string `json:"clientId,omitempty"`
	// AuthorityHost is the Entra authority of a service principal.
	AuthorityHost string `json:"authorityHost,omitempty"`
	// ClientSecret is a service principal's secret.
	ClientSecret string `json:"clientSecret,omitempty"`
	// Certificate is the content of a service principal's certificate
	// file (PEM, or PKCS#12), read from CertificatePath.
	Certificate     []byte `json:"certificate,omitempty"`
	CertificatePath string `json:"certificatePath,omitempty"`
	// RootCAs, when set, is the PEM the authority's TLS certificate must
	// chain to: the host's trust store, written for a plugin that runs
	// inside a machine whose image trusts other roots. Empty uses the
	// system's.
	RootCAs []byte `json:"-"`
}

// FromConfig resolves the identity c names. ok is false when c joins with
// a bootstrap token. A certificate file is read (through read, which maps
// a host path to what this process opens) and must be a regular file of
// mode 0600 owned by root.
func FromConfig(c *config.Config, read SecretFileReader) (s Spec, ok bool, err error) {
	a := &c.Azure
	switch a.Method() {
	case MethodManagedIdentity:
		return Spec{Method: MethodManagedIdentity, ClientID: a.ManagedIdentity.ClientID}, true, nil
	case MethodArc:
		return Spec{Method: MethodArc}, true, nil
	case MethodServicePrincipal:
	default:
		return Spec{}, false, nil
	}
	sp := a.ServicePrincipal
	s = Spec{Method: MethodServicePrincipal, TenantID: sp.TenantID, ClientID: sp.ClientID, ClientSecret: sp.ClientSecret}
	if s.TenantID == "" {
		s.TenantID = a.TenantID
	}
	s.AuthorityHost = a.AuthorityHost
	if s.AuthorityHost == "" {
		s.AuthorityHost = authorityHosts[a.Cloud]
	}
	if s.AuthorityHost == "" {
		return s, true, fmt.Errorf("azure.cloud %q has no known authority; set azure.authorityHost", a.Cloud)
	}
	if !strings.HasSuffix(s.AuthorityHost, "/") {
		s.AuthorityHost += "/"
	}
	if p := sp.ClientCertificatePath; p != "" {
		s.CertificatePath = p
		if s.Certificate, err = read(p); err != nil {
			return s, true, fmt.Errorf("azure.servicePrincipal.clientCertificatePath: %w", err)
		}
	}
	return s, true, nil
}

// Endpoint is the token endpoint s asks, for messages.
func (s Spec) Endpoint() string {
	switch s.Method {
	case MethodManagedIdentity:
		return IMDSTokenEndpoint
	case MethodArc:
		return arcEndpoint()
	}
	return s.AuthorityHost + s.TenantID + "/oauth2/v2.0/token"
}

// String names the identity without its secrets: method, tenant, client
// and endpoint, the facts a failure message needs.
func (s Spec) String() string {
	var b strings.Builder
	switch s.Method {
	case MethodManagedIdentity:
		if s.ClientID == "" {
			b.WriteString("system-assigned managed identity")
		} else {
			b.WriteString("managed identity (client " + s.ClientID + ")")
		}
	case MethodArc:
		b.WriteString("Azure Arc agent identity")
	case MethodServicePrincipal:
		kind := "secret"
		if s.CertificatePath != "" {
			kind = "certificate " + s.CertificatePath
		}
		fmt.Fprintf(&b, "service principal (tenant %s, client %s, %s)", s.TenantID, s.ClientID, kind)
	default:
		b.WriteString("identity " + s.Method)
	}
	b.WriteString(" at " + s.Endpoint())
	return b.String()
}
