package apiprobe

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
)

func server(t *testing.T, h http.HandlerFunc) (*httptest.Server, []byte) {
	t.Helper()
	s := httptest.NewTLSServer(h)
	t.Cleanup(s.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	return s, ca
}

func review(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer abcdef.0123456789abcdef" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"status": map[string]any{"userInfo": map[string]any{"username": "system:bootstrap:abcdef", "groups": []string{"system:bootstrappers"}}}})
}

func TestReachableAndToken(t *testing.T) {
	s, ca := server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/apis/authentication.k8s.io/v1/selfsubjectreviews" {
			review(w, r)
			return
		}
		w.WriteHeader(http.StatusForbidden) // still proves it is the right server
	})
	c, err := New(s.URL, ca, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Reachable(ctx); err != nil {
		t.Fatalf("Reachable: %v", err)
	}
	code, user, err := c.SelfSubjectReview(ctx, "abcdef.0123456789abcdef")
	if err != nil || code != http.StatusOK || user.Username != "system:bootstrap:abcdef" || len(user.Groups) != 1 {
		t.Fatalf("good token: %d %+v %v", code, user, err)
	}
	code, user, err = c.SelfSubjectReview(ctx, "abcdef.ffffffffffffffff")
	if err != nil || code != http.StatusUnauthorized || user.Username != "" {
		t.Fatalf("bad token: %d %+v %v", code, user, err)
	}
}

func TestWrongCA(t *testing.T) {
	s, _ := server(t, func(w http.ResponseWriter, r *http.Request) {})
	// httptest servers all share one certificate, so the wrong CA must be
	// a genuinely unrelated one.
	c2, err := New(s.URL, []byte(unrelatedCA), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Reachable(context.Background()); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("wrong CA: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	s, ca := server(t, func(w http.ResponseWriter, r *http.Request) {})
	url := s.URL
	s.Close()
	c, _ := New(url, ca, 2*time.Second)
	err := c.Reachable(context.Background())
	if err == nil || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), url) {
		t.Fatalf("closed server: %v", err)
	}
}

func TestReviewAnswers(t *testing.T) {
	s, ca := server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer abcdef.0123456789abcdef" {
			_ = json.NewEncoder(w).Encode(map[string]any{"status": map[string]any{"userInfo": map[string]any{"username": "system:anonymous"}}})
			return
		}
		_, _ = w.Write([]byte("not json"))
	})
	c, _ := New(s.URL, ca, 5*time.Second)
	if _, user, err := c.SelfSubjectReview(context.Background(), "abcdef.0123456789abcdef"); err != nil || user.Username != "system:anonymous" {
		t.Fatalf("another identity: %+v %v", user, err)
	}
	code, _, err := c.SelfSubjectReview(context.Background(), "abcdef.ffffffffffffffff")
	if code != http.StatusOK || err == nil || strings.Contains(err.Error(), "ffffffffffffffff") {
		t.Fatalf("an answer that does not parse: %d %v", code, err)
	}
}

// TestNoProxy: the API server is reached directly even when the
// environment names a proxy, as the kubelet in the machine reaches it.
func TestNoProxy(t *testing.T) {
	proxied := false
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { proxied = true }))
	defer proxy.Close()
	t.Setenv("HTTPS_PROXY", proxy.URL)
	t.Setenv("NO_PROXY", "")
	s, ca := server(t, func(w http.ResponseWriter, r *http.Request) {})
	// A name the test certificate covers, not 127.0.0.1 (Go never
	// proxies loopback addresses); every dial still lands on loopback.
	srv := strings.Replace(s.URL, "127.0.0.1", "api.example.com", 1)
	c, _ := New(srv, ca, 5*time.Second)
	proxyAddr := strings.TrimPrefix(proxy.URL, "http://")
	c.HTTP.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != proxyAddr {
			addr = s.Listener.Addr().String()
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	code, _, err := c.Do(context.Background(), http.MethodGet, "/version", "", nil)
	if proxied || code != http.StatusOK {
		t.Fatalf("proxied=%v code=%d err=%v", proxied, code, err)
	}
}

func TestNoCA(t *testing.T) {
	if _, err := New("https://127.0.0.1:1", []byte("nope"), time.Second); err == nil {
		t.Fatal("accepted an empty CA")
	}
}

// unrelatedCA is a self-signed certificate that signed nothing here.
const unrelatedCA = `-----BEGIN CERTIFICATE-----
MIIBjzCCATWgAwIBAgIUZUoCPi0L4wfoRxO5ghPVYrwHe1gwCgYIKoZIzj0EAwIw
HTEbMBkGA1UEAwwSZXhhbXBsZS1jbHVzdGVyLWNhMB4XDTI2MTIwMjE3MTIyOVoX
DTM2MTEyOTE3MTIyOVowHTEbMBkGA1UEAwwSZXhhbXBsZS1jbHVzdGVyLWNhMFkw
EwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEt4L5BA8fdDnSELMFoH0+iGSVFKsyloXh
QI3dlqIB3khQinCUdSFV5BREJYyLdPgQQzLW9H+hR1PRqQyhmfUst6NTMFEwHQYD
VR0OBBYEFBFejmk82R3GniytVZJ3YgncedYsMB8GA1UdIwQYMBaAFBFejmk82R3G
niytVZJ3YgncedYsMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIg
VlHa/dj78A6QsrlU8Igm5Mt9hZsXQeUPettuOuFwtewCIQCmFVYiyQG3pdiANm0n
W+9phgRAWwkofXqfcy2ycAowVA==
-----END CERTIFICATE-----
`

// TestUserAgent: every call reaches the server as the product,
// aks-flex-node/<version>, whichever trust the client was made with.
func TestUserAgent(t *testing.T) {
	old := buildinfo.Version
	buildinfo.Version = "v9.8.7-test"
	t.Cleanup(func() { buildinfo.Version = old })
	var mu sync.Mutex
	var seen []string
	s, ca := server(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" "+r.UserAgent())
		mu.Unlock()
		w.WriteHeader(http.StatusForbidden)
	})
	withCA, err := New(s.URL, ca, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	systemTrust := NewSystemTrust(s.URL, 5*time.Second)
	// The httptest CA stands in for the system trust store here.
	systemTrust.HTTP.Transport.(*http.Transport).TLSClientConfig.RootCAs = withCA.HTTP.Transport.(*http.Transport).TLSClientConfig.RootCAs
	ctx := context.Background()
	for _, c := range []*Client{withCA, systemTrust} {
		if err := c.Reachable(ctx); err != nil {
			t.Fatal(err)
		}
		if code, _, err := c.SelfSubjectReview(ctx, "abcdef.0123456789abcdef"); err != nil || code != http.StatusForbidden {
			t.Fatalf("review: %d %v", code, err)
		}
		if _, _, err := c.Do(ctx, http.MethodGet, "/api/v1/nodes/n1", "", nil); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	const ua = "aks-flex-node/v9.8.7-test"
	want := []string{"/readyz " + ua, "/apis/authentication.k8s.io/v1/selfsubjectreviews " + ua, "/api/v1/nodes/n1 " + ua}
	want = append(want, want...)
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}
