package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// clientPEM is a client certificate and its key in one PEM file, as the
// kubelet keeps kubelet-client-current.pem.
func clientPEM(t testing.TB) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "system:node:n1", Organization: []string{"system:nodes"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})...)
}

// serverCert is a self-signed certificate for 127.0.0.1.
func serverCert(t *testing.T) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "evil"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// machineWith is a machine rootfs holding the kubelet's current client
// certificate (through its link, absolute inside the machine, as the
// kubelet makes it) and kubeconf as its kubelet.conf.
func machineWith(t testing.TB, certPEM []byte, kubeconf string) string {
	t.Helper()
	mroot := t.TempDir()
	pki := filepath.Join(mroot, KubeletPKIDir)
	if err := os.MkdirAll(pki, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pki, "kubelet-client-2026.pem"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(KubeletPKIDir+"/kubelet-client-2026.pem", filepath.Join(mroot, KubeletClientCert)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(mroot, filepath.Dir(KubeletKubeconf)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mroot, KubeletKubeconf), []byte(kubeconf), 0o600); err != nil {
		t.Fatal(err)
	}
	return mroot
}

// apiServer is a TLS server on loopback standing in for the API server:
// it records each request's Authorization header and client certificate.
type apiServer struct {
	*httptest.Server
	mu    sync.Mutex
	auth  []string
	certs [][]byte
}

// newAPIServer starts one; with own, under a certificate of its own (no
// two httptest servers' are told apart by a CA otherwise).
func newAPIServer(t *testing.T, own ...bool) *apiServer {
	s := &apiServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		var c []byte
		if len(r.TLS.PeerCertificates) > 0 {
			c = r.TLS.PeerCertificates[0].Raw
		}
		s.certs = append(s.certs, c)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"APIVersions","versions":["v1"]}`))
	}))
	s.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	if len(own) > 0 && own[0] {
		s.TLS.Certificates = []tls.Certificate{serverCert(t)}
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// caData is the server's certificate as node.kubelet.caCertData holds it.
func (s *apiServer) caData() string {
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}))
}

func (s *apiServer) requests() ([]string, [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...), append([][]byte(nil), s.certs...)
}

// hostileKubeconf is a kubelet.conf the machine wrote: its server is
// another, TLS unchecked, an exec entry that leaves marker when it runs
// and a tokenFile naming a host file.
func hostileKubeconf(server, marker, tokenFile string) string {
	return `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "` + server + `", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {tokenFile: "` + tokenFile + `", exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, interactiveMode: Never,
  args: ["-c", "touch ` + marker + `; echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"FROMEXEC\"}}'"]}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
}

// hostClientAgainst is issue 26's item 3 set up: the config names api,
// the machine's kubelet.conf names evil with an exec entry and a
// tokenFile; the host's client makes one request. It returns the exec
// marker's path.
func hostClientAgainst(t *testing.T, api, evil *apiServer) (marker string, rc *rest.Config) {
	t.Helper()
	dir := t.TempDir()
	marker = filepath.Join(dir, "exec-ran")
	tokenFile := filepath.Join(dir, "host-secret")
	if err := os.WriteFile(tokenFile, []byte("HOSTSECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	mroot := machineWith(t, clientPEM(t), hostileKubeconf(evil.URL, marker, tokenFile))
	c := &config.Config{}
	c.Node.Kubelet.ClusterFQDN, c.Node.Kubelet.CACertData = api.URL, api.caData()
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	rc, err = ClientConfig(c, l, mroot)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(rc.Host + "/api")
	if err != nil {
		t.Fatalf("request to %s: %v", rc.Host, err)
	}
	_ = resp.Body.Close()
	return marker, rc
}

// TestHostClientRunsNoMachineExec: an exec entry in the machine's
// kubelet.conf is not run on the host (it ran as root before).
func TestHostClientRunsNoMachineExec(t *testing.T) {
	api, evil := newAPIServer(t), newAPIServer(t, true)
	marker, rc := hostClientAgainst(t, api, evil)
	if _, err := os.Stat(marker); err == nil || rc.ExecProvider != nil {
		t.Fatalf("the machine's exec entry ran on the host (exec provider %v)", rc.ExecProvider)
	}
	if auth, _ := api.requests(); len(auth) != 1 || auth[0] != "" {
		t.Fatalf("Authorization headers %q, want one request with the certificate alone", auth)
	}
}

// TestHostClientReadsNoMachineTokenFile: a tokenFile in the machine's
// kubelet.conf is neither read nor sent (a host file went out as a bearer
// token before); the client signs in with the kubelet's certificate.
func TestHostClientReadsNoMachineTokenFile(t *testing.T) {
	api, evil := newAPIServer(t), newAPIServer(t, true)
	_, rc := hostClientAgainst(t, api, evil)
	auth, certs := api.requests()
	if rc.BearerToken != "" || rc.BearerTokenFile != "" || len(auth) != 1 || strings.Contains(auth[0], "HOSTSECRET") || auth[0] != "" {
		t.Fatalf("token %q, token file %q, Authorization %q", rc.BearerToken, rc.BearerTokenFile, auth)
	}
	if len(certs) != 1 || len(certs[0]) == 0 {
		t.Fatal("the request carried no client certificate")
	}
}

// TestHostClientIgnoresMachineServerAndInsecure: the server and the TLS
// check are the config's (node.kubelet.clusterFQDN, caCertData), not the
// machine's kubelet.conf's server and insecure-skip-tls-verify.
func TestHostClientIgnoresMachineServerAndInsecure(t *testing.T) {
	api, evil := newAPIServer(t), newAPIServer(t, true)
	_, rc := hostClientAgainst(t, api, evil)
	if rc.Host != api.URL || rc.Insecure {
		t.Fatalf("host %q insecure %v, want the config's %q checked against its CA", rc.Host, rc.Insecure, api.URL)
	}
	if auth, _ := evil.requests(); len(auth) != 0 {
		t.Fatalf("%d requests went to the machine's server", len(auth))
	}
	// The config's CA is checked: a server it did not sign is refused.
	rc.Host = evil.URL
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := hc.Get(evil.URL + "/api"); err == nil {
		_ = resp.Body.Close()
		t.Fatal("a server the config's CA did not sign was accepted")
	}
}

// The certificate is read inside the machine: its absolute link resolves
// there, and a link that climbs out to a host file is not followed out.
func TestHostClientReadsTheCertificateInsideTheMachine(t *testing.T) {
	cert := clientPEM(t)
	mroot := machineWith(t, cert, "")
	c := &config.Config{}
	c.Node.Kubelet.ClusterFQDN, c.Node.Kubelet.CACertData = "https://127.0.0.1:6443", base64.StdEncoding.EncodeToString(cert)
	rc, err := hostClientConfig(c, mroot)
	if err != nil {
		t.Fatal(err)
	}
	if string(rc.CertData) != string(cert) || string(rc.KeyData) != string(cert) || rc.Host != "https://127.0.0.1:6443" {
		t.Fatalf("rest config: host %q, %d cert bytes", rc.Host, len(rc.CertData))
	}
	host := filepath.Join(t.TempDir(), "host-key.pem")
	if err := os.WriteFile(host, clientPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(mroot, KubeletClientCert)
	rel, _ := filepath.Rel(filepath.Dir(link), host)
	_ = os.Remove(link)
	if err := os.Symlink(rel, link); err != nil {
		t.Fatal(err)
	}
	if rc, err := hostClientConfig(c, mroot); err == nil {
		t.Fatalf("read a host file through a link in the machine (%d bytes)", len(rc.CertData))
	}
	// A file that is no certificate and key is named, its bytes not.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(link, []byte("SECRETGARBAGE"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := hostClientConfig(c, mroot); err == nil || !strings.Contains(err.Error(), KubeletClientCert) || strings.Contains(err.Error(), "SECRETGARBAGE") {
		t.Fatalf("garbage certificate: %v", err)
	}
}

// TestIdentityNodeIsOnlyANode (issue 26 item 1): with an Azure identity
// the host's client is the node's own, the config's server and CA with the
// kubelet's client certificate from the machine, never a token for the
// identity (which the cluster lets do nothing but ask for that
// certificate). Before the kubelet has one there is no client, and the
// error names the file; with no config, or one without a server, none.
func TestIdentityNodeIsOnlyANode(t *testing.T) {
	root := t.TempDir()
	l, err := layout.New(root, "/opt/aks-flex-node", "")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../../examples/acl-managed-identity.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse("acl-managed-identity.json", data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ClientConfig(c, l, t.TempDir()); err == nil || !strings.Contains(err.Error(), KubeletClientCert) {
		t.Errorf("before the TLS bootstrap: err %v, want the kubelet's client certificate named", err)
	}
	mroot := machineWith(t, clientPEM(t), "")
	rc, err := ClientConfig(c, l, mroot)
	if err != nil {
		t.Fatal(err)
	}
	if len(rc.CertData) == 0 || len(rc.KeyData) == 0 || len(rc.CAData) == 0 || rc.WrapTransport != nil || rc.ExecProvider != nil || rc.BearerToken != "" || rc.BearerTokenFile != "" {
		t.Fatalf("identity node's client: cert %d bytes, CA %d bytes, wrapped %v, exec %v, bearer %v; want the config's CA and the kubelet's certificate only",
			len(rc.CertData), len(rc.CAData), rc.WrapTransport != nil, rc.ExecProvider, rc.BearerToken != "")
	}
	for _, cfg := range []*config.Config{nil, {}} {
		if _, err := ClientConfig(cfg, l, mroot); err == nil || !strings.Contains(err.Error(), "node.kubelet.clusterFQDN") {
			t.Errorf("without a server in the config: err %v, want node.kubelet.clusterFQDN named", err)
		}
	}
}
