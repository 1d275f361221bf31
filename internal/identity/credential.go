package identity

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/AzureAD/microsoft-authentication-library-for-go/apps/managedidentity"
	"software.sslmate.com/src/go-pkcs12"

	"github.com/Azure/aks-flex-node/internal/transport"
)

// RequestTimeout bounds one token request; Retries more are made on a
// network error or a retriable answer, a second apart, then two.
const (
	RequestTimeout = 10 * time.Second
	Retries        = 2
)

// Options shape how tokens are requested.
type Options struct {
	// HTTPClient sends the requests; nil is the transport policy's client
	// for s (see httpClient). Tests substitute it.
	HTTPClient *http.Client
}

// tokenLimits bound each token request: the kubelet waits for the plugin.
var tokenLimits = transport.Limits{Connect: RequestTimeout, TLSHandshake: RequestTimeout, ResponseHeader: RequestTimeout, Idle: RequestTimeout, Total: 2 * RequestTimeout}

// httpClient is o's client for s: the one transport policy (https; plain
// HTTP only to loopback, where the Arc agent listens, and for a managed
// identity to IMDS, which only speaks plain HTTP on its link-local
// address), trusting Spec.RootCAs or else the system's roots.
func (o Options) httpClient(s Spec) (*http.Client, error) {
	if o.HTTPClient != nil {
		return o.HTTPClient, nil
	}
	p := transport.Policy{Limits: tokenLimits}
	if s.Method == MethodManagedIdentity {
		p.PlainHTTPHost, p.OptIn = imdsHost, "azure.managedIdentity (IMDS answers plain HTTP only)"
	}
	if len(s.RootCAs) > 0 {
		p.RootCAs = x509.NewCertPool()
		if !p.RootCAs.AppendCertsFromPEM(s.RootCAs) {
			return nil, errors.New("the trusted roots copied from the host hold no certificate")
		}
	}
	return p.Client(), nil
}

// imdsHost is IMDS's address.
const imdsHost = "169.254.169.254"

func (o Options) clientOptions(s Spec) (azcore.ClientOptions, error) {
	hc, err := o.httpClient(s)
	if err != nil {
		return azcore.ClientOptions{}, err
	}
	return azcore.ClientOptions{
		Transport: hc,
		Retry: policy.RetryOptions{
			MaxRetries:    Retries,
			RetryDelay:    time.Second,
			MaxRetryDelay: 2 * time.Second,
			TryTimeout:    RequestTimeout,
		},
		// azcore logs nothing unless a listener is set; none is.
	}, nil
}

// envMu serialises the process environment azidentity's managed identity
// reads to choose between IMDS and the Arc agent.
var envMu sync.Mutex

// credential makes the azidentity credential for s.
func (o Options) credential(s Spec) (azcore.TokenCredential, error) {
	co, err := o.clientOptions(s)
	if err != nil {
		return nil, err
	}
	switch s.Method {
	case MethodManagedIdentity, MethodArc:
		envMu.Lock()
		defer envMu.Unlock()
		if err := managedIdentityEnv(s.Method); err != nil {
			return nil, err
		}
		mo := &azidentity.ManagedIdentityCredentialOptions{ClientOptions: co}
		if s.ClientID != "" {
			mo.ID = azidentity.ClientID(s.ClientID)
		}
		return azidentity.NewManagedIdentityCredential(mo)
	case MethodServicePrincipal:
		co.Cloud = cloud.Configuration{ActiveDirectoryAuthorityHost: s.AuthorityHost}
		// Instance discovery asks login.microsoft.com whether the
		// authority is Microsoft's; for a cloud's own authority (or a
		// private one) that answer is known or unwanted.
		if len(s.Certificate) > 0 {
			certs, key, err := parseCertificate(s.Certificate)
			if err != nil {
				return nil, fmt.Errorf("%s: %s (want PEM with the certificate and its key, or PKCS#12 without a password)", s.CertificatePath, redactErr(err))
			}
			return azidentity.NewClientCertificateCredential(s.TenantID, s.ClientID, certs, key,
				&azidentity.ClientCertificateCredentialOptions{ClientOptions: co, DisableInstanceDiscovery: true})
		}
		return azidentity.NewClientSecretCredential(s.TenantID, s.ClientID, s.ClientSecret,
			&azidentity.ClientSecretCredentialOptions{ClientOptions: co, DisableInstanceDiscovery: true})
	}
	return nil, fmt.Errorf("unknown identity method %q", s.Method)
}

// parseCertificate reads a client certificate file: PEM (certificate and
// key) through azidentity, or PKCS#12 through go-pkcs12, which reads the
// SHA-256 MACs and AES encryption OpenSSL 3 writes by default as well as
// the legacy ones Azure exports (azidentity's reader knows only those).
func parseCertificate(data []byte) ([]*x509.Certificate, crypto.PrivateKey, error) {
	if bytes.Contains(data, []byte("-----BEGIN")) {
		return azidentity.ParseCertificates(data, nil)
	}
	key, cert, chain, err := pkcs12.DecodeChain(data, "")
	if err != nil {
		return nil, nil, fmt.Errorf("PKCS#12: %w", err)
	}
	return append([]*x509.Certificate{cert}, chain...), key, nil
}

// The variables azidentity reads to find a managed identity endpoint.
var miEnv = []string{"IDENTITY_ENDPOINT", "IDENTITY_HEADER", "IDENTITY_SERVER_THUMBPRINT", "MSI_ENDPOINT", "MSI_SECRET", "IMDS_ENDPOINT"}

// managedIdentityEnv makes azidentity use IMDS (a managed identity) or the
// Arc agent (arc), whatever else the environment says: the config names
// the endpoint, not the environment a plugin happens to inherit.
func managedIdentityEnv(method string) error {
	want := managedidentity.DefaultToIMDS
	endpoint := os.Getenv("IDENTITY_ENDPOINT")
	for _, k := range miEnv {
		_ = os.Unsetenv(k)
	}
	if method == MethodArc {
		want = managedidentity.AzureArc
		if endpoint == "" {
			endpoint = ArcTokenEndpoint
		}
		_ = os.Setenv("IDENTITY_ENDPOINT", endpoint)
		_ = os.Setenv("IMDS_ENDPOINT", "http://localhost:40342")
	}
	got, err := managedidentity.GetSource()
	if err != nil {
		return err
	}
	if got != want {
		// Only the Arc agent's binary makes azidentity choose Arc over IMDS.
		return fmt.Errorf("this host runs the Azure Arc agent (%s exists), whose identity azidentity takes instead of IMDS: use azure.arc instead of azure.managedIdentity", "/opt/azcmagent/bin/himds")
	}
	return nil
}

// arcEndpoint is the Arc agent's identity endpoint this process uses.
func arcEndpoint() string {
	if e := os.Getenv("IDENTITY_ENDPOINT"); e != "" {
		return e
	}
	return ArcTokenEndpoint
}

// Fetch requests a new token for resource (an application ID URI or ID;
// "/.default" is appended) from s's endpoint, without any cache.
func Fetch(ctx context.Context, s Spec, resource string, o Options) (Token, error) {
	cred, err := o.credential(s)
	if err != nil {
		return Token{}, fmt.Errorf("%s: %s", s, redact(err.Error(), s))
	}
	obtained := time.Now()
	at, err := cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{resource + "/.default"}})
	if err != nil {
		return Token{}, fetchErrorCode(&FetchError{Spec: s, Detail: describe(err, s)})
	}
	return Token{AccessToken: at.Token, ExpiresOn: at.ExpiresOn.UTC(), ObtainedAt: obtained.UTC()}, nil
}
