// Package fakeentra is a Microsoft Entra tenant as far as the node's
// identities need one, speaking the documented wire protocols over TLS:
// OpenID discovery (/<tenant>/v2.0/.well-known/openid-configuration), its
// signing keys (JWKS), and the v2.0 token endpoint's client_credentials
// grant with a client secret or a signed client assertion (a
// certificate). Access tokens are RS256 JWTs with oid, tid, appid, aud,
// iss, iat, nbf and exp, so a kube-apiserver with a structured
// AuthenticationConfiguration validates them itself. Errors carry Entra's
// AADSTS codes. The managed identity endpoints (test/fakeimds) mint their
// tokens here too. Tests serve it only on loopback or on an address of a
// network namespace they made.
package fakeentra

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Client is an application registered in the tenant: a service
// principal (with a secret or a certificate) or a managed identity.
type Client struct {
	AppID    string
	ObjectID string
	Secret   string
	Cert     *x509.Certificate
}

// Tenant is one running fake tenant.
type Tenant struct {
	ID string
	// AuthorityHost is what azure.authorityHost names: https://addr/.
	AuthorityHost string
	// Issuer is the iss of its tokens: <AuthorityHost><ID>/v2.0.
	Issuer string
	// CAPEM is the CA its TLS certificate chains to.
	CAPEM []byte

	key      *rsa.PrivateKey
	kid      string
	lifetime atomic.Int64 // nanoseconds
	mu       sync.Mutex
	clients  map[string]Client
	// requests counts token endpoint requests; issued counts tokens
	// minted, by appid, whichever endpoint asked.
	requests atomic.Int64
	issued   sync.Map // appid -> *atomic.Int64

	servingCert tls.Certificate
}

// NewGUID returns a random GUID.
func NewGUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Start serves a new tenant over TLS on l until t ends. Its certificate
// names l's address.
func Start(t testing.TB, l net.Listener) *Tenant {
	t.Helper()
	tn, err := New(l.Addr().(*net.TCPAddr).IP)
	if err != nil {
		t.Fatalf("fakeentra: %v", err)
	}
	tn.AuthorityHost = "https://" + l.Addr().String() + "/"
	tn.Issuer = tn.AuthorityHost + tn.ID + "/v2.0"
	// Clients that do not trust the CA (a refusal test) would fill the
	// test log with handshake errors.
	srv := &http.Server{Handler: tn.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(tls.NewListener(l, tn.TLSConfig())) }()
	t.Cleanup(func() { _ = srv.Close() })
	return tn
}

// New makes a tenant whose TLS certificate is for ip; Start serves it.
// The caller sets AuthorityHost and Issuer when it serves it itself.
func New(ip net.IP) (*Tenant, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	tn := &Tenant{ID: NewGUID(), key: key, clients: map[string]Client{}}
	sum := sha256.Sum256(key.PublicKey.N.Bytes())
	tn.kid = base64.RawURLEncoding.EncodeToString(sum[:12])
	tn.lifetime.Store(int64(time.Hour))
	sv, err := newServing([]net.IP{ip}, []string{"localhost"})
	if err != nil {
		return nil, err
	}
	tn.CAPEM = sv.caPEM
	tn.servingCert = sv.cert
	return tn, nil
}

// TLSConfig is the server side of the tenant's TLS.
func (tn *Tenant) TLSConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{tn.servingCert}, MinVersion: tls.VersionTLS12}
}

// SetLifetime sets how long tokens minted from now on live.
func (tn *Tenant) SetLifetime(d time.Duration) { tn.lifetime.Store(int64(d)) }

// AddClient registers (or replaces) an application.
func (tn *Tenant) AddClient(c Client) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	tn.clients[c.AppID] = c
}

func (tn *Tenant) client(appID string) (Client, bool) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	c, ok := tn.clients[appID]
	return c, ok
}

// TokenRequests is how many requests the token endpoint answered.
func (tn *Tenant) TokenRequests() int64 { return tn.requests.Load() }

// Issued is how many tokens were minted for appID, by any endpoint.
func (tn *Tenant) Issued(appID string) int64 {
	if v, ok := tn.issued.Load(appID); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// Mint issues an access token for the registered client appID, for
// audience, and returns it with its expiry.
func (tn *Tenant) Mint(appID, audience string) (string, time.Time, error) {
	c, ok := tn.client(appID)
	if !ok {
		return "", time.Time{}, fmt.Errorf("no client %s", appID)
	}
	now := time.Now()
	exp := now.Add(time.Duration(tn.lifetime.Load()))
	tok, err := signRS256(tn.key, map[string]any{"alg": "RS256", "typ": "JWT", "kid": tn.kid}, map[string]any{
		"aud": audience, "iss": tn.Issuer, "iat": now.Unix(), "nbf": now.Unix(), "exp": exp.Unix(),
		"oid": c.ObjectID, "sub": c.ObjectID, "tid": tn.ID, "appid": c.AppID, "azp": c.AppID, "ver": "2.0",
	})
	if err != nil {
		return "", time.Time{}, err
	}
	v, _ := tn.issued.LoadOrStore(appID, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	return tok, exp, nil
}

// AuthenticationConfiguration is a kube-apiserver
// apiserver.config.k8s.io/v1 AuthenticationConfiguration that trusts this
// tenant's tokens for audience, with the object ID as the username.
func (tn *Tenant) AuthenticationConfiguration(audience string) []byte {
	var ca strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(string(tn.CAPEM)), "\n") {
		ca.WriteString("      " + l + "\n")
	}
	return []byte(fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: %s
    audiences:
    - %s
    certificateAuthority: |
%s  claimValidationRules:
  - claim: tid
    requiredValue: %s
  claimMappings:
    username:
      claim: oid
      prefix: ""
`, tn.Issuer, audience, ca.String(), tn.ID))
}

func (tn *Tenant) jwks() map[string]any {
	pub := tn.key.PublicKey
	return map[string]any{"keys": []map[string]any{{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": tn.kid,
		"n": base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}}}
}
