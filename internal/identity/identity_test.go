package identity

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/transport"
	"github.com/Azure/aks-flex-node/test/fakeentra"
	"github.com/Azure/aks-flex-node/test/fakeimds"
)

func startTenant(t *testing.T) *fakeentra.Tenant {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return fakeentra.Start(t, l)
}

// claims decodes a JWT's payload without verifying it (the fake signed it).
func claims(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", tok)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func spSpec(tn *fakeentra.Tenant, appID string) Spec {
	return Spec{Method: MethodServicePrincipal, TenantID: tn.ID, ClientID: appID, AuthorityHost: tn.AuthorityHost, RootCAs: tn.CAPEM}
}

func TestServicePrincipalSecret(t *testing.T) {
	tn := startTenant(t)
	app, oid := fakeentra.NewGUID(), fakeentra.NewGUID()
	tn.AddClient(fakeentra.Client{AppID: app, ObjectID: oid, Secret: "s3cret-value"})
	s := spSpec(tn, app)
	s.ClientSecret = "s3cret-value"
	tok, err := Fetch(context.Background(), s, AKSServerID, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := claims(t, tok.AccessToken)
	if c["oid"] != oid || c["aud"] != AKSServerID || c["tid"] != tn.ID || c["appid"] != app {
		t.Errorf("claims %v", c)
	}
	if d := time.Until(tok.ExpiresOn); d < 50*time.Minute || d > time.Hour+time.Minute {
		t.Errorf("expires in %v", d)
	}

	t.Run("wrong secret", func(t *testing.T) {
		bad := s
		bad.ClientSecret = "not-the-secret"
		_, err := Fetch(context.Background(), bad, AKSServerID, Options{})
		var fe *FetchError
		if !errors.As(err, &fe) || fe.Code != "AADSTS7000215" {
			t.Fatalf("want AADSTS7000215, got %v", err)
		}
		for _, want := range []string{"AADSTS7000215: Invalid client secret provided", "HTTP 401", tn.ID, app, s.Endpoint()} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		}
		if strings.Contains(err.Error(), "not-the-secret") || strings.Contains(err.Error(), "Trace ID") {
			t.Errorf("error quotes the secret or the trace lines:\n%v", err)
		}
	})
	t.Run("unknown client", func(t *testing.T) {
		other := s
		other.ClientID = fakeentra.NewGUID()
		_, err := Fetch(context.Background(), other, AKSServerID, Options{})
		var fe *FetchError
		if !errors.As(err, &fe) || fe.Code != "AADSTS700016" || !strings.Contains(err.Error(), other.ClientID) {
			t.Fatalf("want AADSTS700016 naming the client, got %v", err)
		}
	})
	t.Run("untrusted authority", func(t *testing.T) {
		other := s
		other.RootCAs = nil // the system roots do not know the fake's CA
		_, err := Fetch(context.Background(), other, AKSServerID, Options{})
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("want a TLS failure, got %v", err)
		}
	})
}

func TestServicePrincipalCertificate(t *testing.T) {
	tn := startTenant(t)
	app, oid := fakeentra.NewGUID(), fakeentra.NewGUID()
	cert, pemData, err := fakeentra.ClientCertificate("sp")
	if err != nil {
		t.Fatal(err)
	}
	tn.AddClient(fakeentra.Client{AppID: app, ObjectID: oid, Cert: cert})
	s := spSpec(tn, app)
	s.Certificate, s.CertificatePath = pemData, "/etc/aks-flex-node/sp.pem"
	tok, err := Fetch(context.Background(), s, AKSServerID, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c := claims(t, tok.AccessToken); c["oid"] != oid {
		t.Errorf("claims %v", c)
	}

	t.Run("pkcs12", func(t *testing.T) {
		if _, err := exec.LookPath("openssl"); err != nil {
			t.Skip("openssl makes the PKCS#12 file")
		}
		dir := t.TempDir()
		if err := os.WriteFile(dir+"/sp.pem", pemData, 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("openssl", "pkcs12", "-export", "-in", dir+"/sp.pem", "-out", dir+"/sp.pfx", "-passout", "pass:").CombinedOutput(); err != nil {
			t.Fatalf("openssl: %v\n%s", err, out)
		}
		pfx, err := os.ReadFile(dir + "/sp.pfx")
		if err != nil {
			t.Fatal(err)
		}
		p := s
		p.Certificate, p.CertificatePath = pfx, "/etc/aks-flex-node/sp.pfx"
		if _, err := Fetch(context.Background(), p, AKSServerID, Options{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("another certificate", func(t *testing.T) {
		_, otherPEM, err := fakeentra.ClientCertificate("other")
		if err != nil {
			t.Fatal(err)
		}
		o := s
		o.Certificate = otherPEM
		_, err = Fetch(context.Background(), o, AKSServerID, Options{})
		var fe *FetchError
		if !errors.As(err, &fe) || fe.Code != "AADSTS700027" {
			t.Fatalf("want AADSTS700027, got %v", err)
		}
		if strings.Contains(err.Error(), "PRIVATE KEY") {
			t.Errorf("the key leaked: %v", err)
		}
	})
	t.Run("not a certificate", func(t *testing.T) {
		o := s
		o.Certificate = []byte("hello")
		_, err := Fetch(context.Background(), o, AKSServerID, Options{})
		if err == nil || !strings.Contains(err.Error(), "/etc/aks-flex-node/sp.pem") {
			t.Fatalf("want an error naming the file, got %v", err)
		}
	})
}

// imdsClient sends what azidentity addresses to IMDS (169.254.169.254) to
// srv instead: the link-local address is not reachable from a unit test.
func imdsClient(srv *httptest.Server) *http.Client {
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != "169.254.169.254:80" {
			return nil, errors.New("unexpected address " + addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
	}
	return &http.Client{Transport: tr}
}

func TestManagedIdentity(t *testing.T) {
	tn := startTenant(t)
	system, user := fakeentra.NewGUID(), fakeentra.NewGUID()
	tn.AddClient(fakeentra.Client{AppID: system, ObjectID: fakeentra.NewGUID()})
	tn.AddClient(fakeentra.Client{AppID: user, ObjectID: "user-oid"})
	id := &fakeimds.Identity{Minter: tn, SystemAssigned: system, UserAssigned: []string{user}}
	srv := httptest.NewServer(fakeimds.HandlerWithIdentity(nil, nil, id))
	t.Cleanup(srv.Close)
	o := Options{HTTPClient: imdsClient(srv)}

	tok, err := Fetch(context.Background(), Spec{Method: MethodManagedIdentity}, AKSServerID, o)
	if err != nil {
		t.Fatal(err)
	}
	if c := claims(t, tok.AccessToken); c["appid"] != system || c["aud"] != AKSServerID {
		t.Errorf("system-assigned claims %v", c)
	}
	tok, err = Fetch(context.Background(), Spec{Method: MethodManagedIdentity, ClientID: user}, AKSServerID, o)
	if err != nil {
		t.Fatal(err)
	}
	if c := claims(t, tok.AccessToken); c["oid"] != "user-oid" {
		t.Errorf("user-assigned claims %v", c)
	}
	other := fakeentra.NewGUID()
	_, err = Fetch(context.Background(), Spec{Method: MethodManagedIdentity, ClientID: other}, AKSServerID, o)
	if err == nil || !strings.Contains(err.Error(), "Identity not found") || !strings.Contains(err.Error(), other) || !strings.Contains(err.Error(), IMDSTokenEndpoint) {
		t.Fatalf("want IMDS's answer naming the client and endpoint, got %v", err)
	}
}

func TestCacheServesUntilRefresh(t *testing.T) {
	tn := startTenant(t)
	app := fakeentra.NewGUID()
	tn.AddClient(fakeentra.Client{AppID: app, ObjectID: "o", Secret: "x-secret-value"})
	tn.SetLifetime(3 * time.Minute)
	s := spSpec(tn, app)
	s.ClientSecret = "x-secret-value"
	now := time.Now()
	src := &Source{Spec: s, Cache: &Cache{Dir: filepath.Join(t.TempDir(), "tokens")}, Now: func() time.Time { return now }}
	first, fetched, err := src.Token(context.Background(), AKSServerID)
	if err != nil || !fetched {
		t.Fatalf("first: fetched=%v %v", fetched, err)
	}
	second, fetched, err := src.Token(context.Background(), AKSServerID)
	if err != nil || fetched || second.AccessToken != first.AccessToken {
		t.Fatalf("second call asked the endpoint (fetched=%v, err=%v)", fetched, err)
	}
	// A 3-minute token is replaced half-way.
	if d := first.ExpiresOn.Sub(first.RefreshAt()); d < 89*time.Second || d > 91*time.Second {
		t.Errorf("refresh %v before expiry, want 90s", d)
	}
	now = first.RefreshAt().Add(time.Second)
	if _, fetched, err = src.Token(context.Background(), AKSServerID); err != nil || !fetched {
		t.Fatalf("after RefreshAt: fetched=%v %v", fetched, err)
	}
	if got := tn.TokenRequests(); got != 2 {
		t.Errorf("token endpoint hit %d times, want 2", got)
	}
	fi, err := os.Stat(filepath.Join(src.Cache.Dir, Key(s, AKSServerID)+".json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("cache file: %v %v", fi, err)
	}
	if di, err := os.Stat(src.Cache.Dir); err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("cache dir: %v %v", di, err)
	}
	// A rotated secret is another cache entry.
	r := s
	r.ClientSecret = "y"
	if Key(r, AKSServerID) == Key(s, AKSServerID) {
		t.Error("a new secret shares the old one's cache entry")
	}
}

func TestConcurrentCallersFetchOnce(t *testing.T) {
	tn := startTenant(t)
	app := fakeentra.NewGUID()
	tn.AddClient(fakeentra.Client{AppID: app, ObjectID: "o", Secret: "x-secret-value"})
	s := spSpec(tn, app)
	s.ClientSecret = "x-secret-value"
	cache := &Cache{Dir: t.TempDir()}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := (&Source{Spec: s, Cache: cache}).Token(context.Background(), AKSServerID); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := tn.TokenRequests(); got != 1 {
		t.Errorf("8 concurrent callers made %d token requests, want 1", got)
	}
}

func TestExecCredential(t *testing.T) {
	tok := Token{AccessToken: "tkn", ObtainedAt: time.Unix(1000, 0), ExpiresOn: time.Unix(1000+3600, 0)}
	var b bytes.Buffer
	if err := WriteExecCredential(&b, tok); err != nil {
		t.Fatal(err)
	}
	var ec map[string]any
	if err := json.Unmarshal(b.Bytes(), &ec); err != nil {
		t.Fatal(err)
	}
	st := ec["status"].(map[string]any)
	if ec["apiVersion"] != "client.authentication.k8s.io/v1" || ec["kind"] != "ExecCredential" || st["token"] != "tkn" ||
		st["expirationTimestamp"] != time.Unix(1000+3600-300, 0).UTC().Format(time.RFC3339) {
		t.Errorf("exec credential %s", b.String())
	}
	if err := CheckExecInfo(`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":false}}`); err != nil {
		t.Error(err)
	}
	if err := CheckExecInfo(`{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential"}`); err == nil || !strings.Contains(err.Error(), "v1beta1") {
		t.Errorf("v1beta1: %v", err)
	}
	if err := CheckExecInfo(""); err != nil {
		t.Error(err)
	}
}

func TestSecretFileModes(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "etc/aks-flex-node")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "sp.pem")
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	read := ReadSecretFile(root)
	if data, err := read("/etc/aks-flex-node/sp.pem"); err != nil || string(data) != "x" {
		t.Fatalf("0600: %q %v", data, err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := read("/etc/aks-flex-node/sp.pem")
	if !errors.Is(err, ErrLooseSecretFile) || !strings.Contains(err.Error(), "/etc/aks-flex-node/sp.pem has mode 0644") {
		t.Errorf("0644: %v", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		if _, err := read("/etc/aks-flex-node/sp.pem"); !errors.Is(err, ErrLooseSecretFile) || !strings.Contains(err.Error(), "owned by uid 1000") {
			t.Errorf("uid 1000: %v", err)
		}
	}
}

func TestFromConfig(t *testing.T) {
	c := &config.Config{Azure: config.Azure{Cloud: "AzureUSGovernmentCloud", TenantID: "t-from-azure",
		ServicePrincipal: &config.ServicePrincipal{ClientID: "c", ClientCertificatePath: "/etc/aks-flex-node/sp.pem"}}}
	s, ok, err := FromConfig(c, func(p string) ([]byte, error) { return []byte("pem of " + p), nil })
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if s.AuthorityHost != "https://login.microsoftonline.us/" || s.TenantID != "t-from-azure" || string(s.Certificate) != "pem of /etc/aks-flex-node/sp.pem" {
		t.Errorf("spec %+v", s)
	}
	if got := s.String(); got != "service principal (tenant t-from-azure, client c, certificate /etc/aks-flex-node/sp.pem) at https://login.microsoftonline.us/t-from-azure/oauth2/v2.0/token" {
		t.Errorf("String: %s", got)
	}
	c.Azure.AuthorityHost = "https://login.private.example"
	if s, _, _ = FromConfig(c, func(string) ([]byte, error) { return nil, nil }); s.AuthorityHost != "https://login.private.example/" {
		t.Errorf("explicit authority: %s", s.AuthorityHost)
	}
	c.Azure.ServicePrincipal.ClientSecret, c.Azure.ServicePrincipal.ClientCertificatePath = "hunter2", ""
	if s, _, _ = FromConfig(c, nil); strings.Contains(s.String(), "hunter2") {
		t.Errorf("String shows the secret: %s", s)
	}
	if _, ok, _ := FromConfig(&config.Config{Azure: config.Azure{BootstrapToken: &config.BootstrapToken{Token: "a"}}}, nil); ok {
		t.Error("a bootstrap token is not an identity")
	}
}

func TestIdentityDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "identity")
	s := Spec{Method: MethodServicePrincipal, TenantID: "t", ClientID: "c", ClientSecret: "x", AuthorityHost: "https://a/", RootCAs: []byte("roots")}
	if changed, err := SaveDir(dir, s); err != nil || !changed {
		t.Fatal(changed, err)
	}
	if changed, err := SaveDir(dir, s); err != nil || changed {
		t.Fatalf("second save changed=%v %v", changed, err)
	}
	got, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.ClientSecret != "x" || string(got.RootCAs) != "roots" || Key(got, "r") != Key(s, "r") {
		t.Errorf("loaded %+v", got)
	}
	for _, f := range []string{dir + "/identity.json", dir + "/roots.pem"} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, fi, err)
		}
	}
}

// Token requests go through the one transport policy: plain HTTP only to
// loopback (the Arc agent) and, for a managed identity, to IMDS.
func TestTokenRequestsFollowTheTransportPolicy(t *testing.T) {
	for _, tc := range []struct {
		method string
		url    string
	}{
		{MethodServicePrincipal, "http://login.example.test/t/oauth2/v2.0/token"},
		{MethodManagedIdentity, "http://169.254.169.253/metadata/identity/oauth2/token"},
		{MethodArc, "http://10.1.2.3:40342/metadata/identity/oauth2/token"},
	} {
		c, err := Options{}.httpClient(Spec{Method: tc.method})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Get(tc.url)
		var refused *transport.RefusedError
		if !errors.As(err, &refused) {
			t.Errorf("%s: GET %s: %v, want the policy's refusal", tc.method, tc.url, err)
		}
	}
}
