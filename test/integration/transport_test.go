package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/Azure/aks-flex-node/test/aclhost"
)

// serveCounted serves h on l (TLS with cert when it is set) until the test
// ends and counts the requests that reached the handler.
func serveCounted(t *testing.T, l net.Listener, cert *tls.Certificate, h http.Handler) *atomic.Int32 {
	t.Helper()
	n := &atomic.Int32{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h.ServeHTTP(w, r)
	}), ErrorLog: log.New(io.Discard, "", 0)}
	if cert != nil {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}}
		go srv.ServeTLS(l, "", "")
	} else {
		go srv.Serve(l)
	}
	t.Cleanup(func() { srv.Close() })
	return n
}

// selfSigned is a certificate for ip that is its own CA: what curl gets
// as CURL_CA_BUNDLE.
func selfSigned(t *testing.T, ip string) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: ip},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP(ip)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// binaryServer serves the agent binary and its checksum file, and
// redirects /redirect/<path> to redirectTo+<path>.
func binaryServer(t *testing.T, redirectTo string) http.Handler {
	t.Helper()
	bin, err := os.ReadFile(agentBinary)
	if err != nil {
		t.Fatal(err)
	}
	sum := fileSHA256(t, agentBinary)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/redirect/"):
			http.Redirect(w, r, redirectTo+strings.TrimPrefix(r.URL.Path, "/redirect"), http.StatusFound)
		case r.URL.Path == "/aks-flex-node":
			w.Write(bin)
		case r.URL.Path == "/aks-flex-node.sha256":
			w.Write([]byte(sum + "  aks-flex-node\n"))
		default:
			http.NotFound(w, r)
		}
	})
}

// TestInstallDownloadPolicy runs install.sh --download-url for real in
// the ACL-like host against servers on an RFC 1918 address (a namespace
// the test made, joined to the host by a veth pair) and on the host's
// loopback: plain http off loopback is refused naming https before any
// request is sent, an https download that redirects to plain http is
// refused by curl, https and loopback http install.
func TestInstallDownloadPolicy(t *testing.T) {
	ctx := context.Background()
	h := prepare(t, aclhost.ACL, testConfig(t, aclPrefix))
	peer := h.Peer(t, "10.213.0.1/30", "10.213.0.2/30")
	pl, err := peer.Listen("0")
	must(t, err)
	plainURL := "http://" + pl.Addr().String()
	plainHits := serveCounted(t, pl, nil, binaryServer(t, ""))
	cert, certPEM := selfSigned(t, peer.Addr)
	tl, err := peer.Listen("0")
	must(t, err)
	httpsURL := "https://" + tl.Addr().String()
	tlsHits := serveCounted(t, tl, &cert, binaryServer(t, plainURL))
	must(t, h.WriteFile("/root/dist/ca.pem", certPEM, 0o644))
	before := snapshot(t, h)

	_, stderr, err := h.Run(ctx, "/root/dist/install.sh", "--download-url", plainURL+"/aks-flex-node")
	if err == nil || !strings.Contains(stderr, "use an https URL") || !strings.Contains(stderr, "loopback") {
		t.Errorf("plain http to %s: err %v:\n%s", peer.Addr, err, stderr)
	}
	_, stderr, err = h.Run(ctx, "env", "AKS_FLEX_NODE_DOWNLOAD_URL="+plainURL+"/aks-flex-node", "/root/dist/install.sh")
	if err == nil || !strings.Contains(stderr, "use an https URL") {
		t.Errorf("plain http from the environment: err %v:\n%s", err, stderr)
	}
	_, stderr, err = h.Run(ctx, "env", "CURL_CA_BUNDLE=/root/dist/ca.pem", "/root/dist/install.sh", "--download-url", httpsURL+"/redirect/aks-flex-node")
	if err == nil || tlsHits.Load() == 0 {
		t.Errorf("https redirecting to plain http: err %v, %d https requests:\n%s", err, tlsHits.Load(), stderr)
	}
	t.Logf("redirect to plain http refused:\n%s", stderr)
	if n := plainHits.Load(); n != 0 {
		t.Errorf("the plain-HTTP server on %s answered %d requests", peer.Addr, n)
	}
	if d := aclhost.Diff(before, snapshot(t, h)); len(d) > 0 {
		t.Errorf("a refused install wrote:\n%s", strings.Join(d, "\n"))
	}

	out := h.RunOK(t, "env", "CURL_CA_BUNDLE=/root/dist/ca.pem", "/root/dist/install.sh", "--download-url", httpsURL+"/aks-flex-node")
	if !strings.Contains(out, "installed "+aclPrefix+"/bin/aks-flex-node") || !strings.Contains(out, "verified "+httpsURL) {
		t.Errorf("https install:\n%s", out)
	}

	ll, err := h.ListenTCP("127.0.0.1:0")
	must(t, err)
	serveCounted(t, ll, nil, binaryServer(t, ""))
	out = h.RunOK(t, "/root/dist/install.sh", "--download-url", "http://"+ll.Addr().String()+"/aks-flex-node")
	if !strings.Contains(out, "installed "+aclPrefix+"/bin/aks-flex-node") {
		t.Errorf("loopback http install:\n%s", out)
	}
}

// withBootstrap is cfg with keys set in its bootstrap section.
func withBootstrap(t *testing.T, cfg []byte, kv map[string]any) []byte {
	t.Helper()
	var m map[string]any
	must(t, json.Unmarshal(cfg, &m))
	m["bootstrap"] = kv
	b, err := json.MarshalIndent(m, "", "  ")
	must(t, err)
	return b
}

// TestStartRefusesPlainHTTPRegistryOnACLHost: start, through its
// worker-image preflight check, refuses a worker image on a registry at
// an RFC 1918 address that speaks only plain HTTP, before it touches the
// host and without one HTTP request served, naming https and
// bootstrap.ociImagePlainHTTP. With that key the same registry resolves
// (preflight), and the tag-only reference is a warning naming the digest.
func TestStartRefusesPlainHTTPRegistryOnACLHost(t *testing.T) {
	ctx := context.Background()
	h := prepare(t, aclhost.ACL, nil)
	peer := h.Peer(t, "10.213.0.5/30", "10.213.0.6/30")
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	push := httptest.NewServer(reg)
	defer push.Close()
	img := contractImage(t, runtime.GOARCH)
	pr, err := name.ParseReference(strings.TrimPrefix(push.URL, "http://")+"/aks/worker:v1", name.Insecure)
	must(t, err)
	must(t, remote.Write(pr, img))
	digest, err := img.Digest()
	must(t, err)
	l, err := peer.Listen("5000")
	must(t, err)
	hits := serveCounted(t, l, nil, reg)
	ref := l.Addr().String() + "/aks/worker:v1"

	cfg := withBootstrap(t, testConfig(t, aclPrefix), map[string]any{"ociImage": ref})
	must(t, h.WriteFile("/etc/aks-flex-node/config.json", cfg, 0o600))
	h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node")
	before := snapshot(t, h)
	beforeRun, err := h.Snapshot("/run", "/tmp", "/var/tmp")
	must(t, err)

	stdout, stderr, err := h.Run(ctx, aclPrefix+"/bin/aks-flex-node", "start", "--config", "/etc/aks-flex-node/config.json",
		"--ignore-preflight-errors=api-server-reachable,bootstrap-token")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("start with a plain-HTTP registry on %s: %v\n%s\n%s", peer.Addr, err, stdout, stderr)
	}
	for _, want := range []string{"[ERROR worker-image]", "refusing plain HTTP to " + l.Addr().String(), "https", "bootstrap.ociImagePlainHTTP"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("refusal does not say %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "refused before touching the host") {
		t.Errorf("stderr:\n%s", stderr)
	}
	t.Logf("start refused:\n%s", stdout)
	if n := hits.Load(); n != 0 {
		t.Errorf("the plain-HTTP registry served %d requests", n)
	}
	if d := aclhost.Diff(before, snapshot(t, h)); len(d) > 0 {
		t.Errorf("a refused start wrote:\n%s", strings.Join(d, "\n"))
	}
	afterRun, err := h.Snapshot("/run", "/tmp", "/var/tmp")
	must(t, err)
	if d := aclhost.Diff(beforeRun, afterRun); len(d) > 0 {
		t.Errorf("a refused start changed /run or a temp dir:\n%s", strings.Join(d, "\n"))
	}

	// Said out loud, the same registry is used, and the tag is a warning.
	must(t, h.WriteFile("/etc/aks-flex-node/config.json", withBootstrap(t, testConfig(t, aclPrefix), map[string]any{"ociImage": ref, "ociImagePlainHTTP": true}), 0o600))
	r, _, out := runPreflight(t, h)
	sev, msg, remedy := r.check(t, "worker-image")
	if sev != "warning" || !strings.Contains(msg, digest.String()) || !strings.Contains(msg, "allowed by bootstrap.ociImagePlainHTTP") ||
		!strings.Contains(remedy, l.Addr().String()+"/aks/worker@"+digest.String()) {
		t.Errorf("with the opt-in: worker-image %s: %s (%s)\n%s", sev, msg, remedy, out)
	}
	if hits.Load() == 0 {
		t.Error("with the opt-in, no request reached the registry")
	}
}
