package day2

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	clientCertLink = machineRoot + "/var/lib/kubelet/pki/kubelet-client-current.pem"
	// hostConfig is the node's config on the host, where the host's client
	// takes the API server from.
	hostConfig = "/etc/aks-flex-node/config.json"
	// skew is how far the clock-skew case moves the clock.
	skew = 10 * time.Minute
)

// clusterCA is the control plane's CA, which signs what the test forges.
func (e *env) clusterCA(t *testing.T) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	b, _ := pem.Decode(e.cp.CAPEM)
	ca, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(e.cp.CAKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := pem.Decode(keyPEM)
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		t.Fatalf("CA key %s: %v", e.cp.CAKeyFile, err)
	}
	return ca, key
}

// issue signs tmpl with the cluster CA and returns certificate and key
// as PEM.
func (e *env) issue(t *testing.T, tmpl *x509.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	ca, caKey := e.clusterCA(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// replaceInMachine puts data at p (a host path in the machine's root) in
// place of what is there, and returns what puts it back. A link (the
// kubelet's current-certificate link) is replaced by the file, and
// restored as the link.
func (e *env) replaceInMachine(t *testing.T, p string, data []byte) func() {
	t.Helper()
	hp := e.h.Path(p)
	saved := hp + ".day2-saved"
	if err := os.Rename(hp, saved); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.Rename(saved, hp); err != nil {
			t.Errorf("restore %s: %v", p, err)
		}
	}
}

// debugExpiredCert: the kubelet's client certificate replaced by one the
// cluster CA signed for this node that expired yesterday: debug says it
// expired, and what to do.
func (e *env) debugExpiredCert(t *testing.T) {
	now := time.Now()
	cert, key := e.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
		NotBefore:   now.Add(-30 * 24 * time.Hour),
		NotAfter:    now.Add(-24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	restore := e.replaceInMachine(t, clientCertLink, append(cert, key...))
	defer restore()
	e.expectError(t, "client-certificate", "expired", "system:node:"+nodeName)
}

// debugClockSkew moves the clock the debug reads against by ten minutes.
// The test cannot move this machine's clock (the host shares its kernel
// with every other test here), so it moves the API server's instead,
// which is what the check compares: one debug run reads a copy of the
// node's config whose server is a proxy in front of the API server that
// adds ten minutes to each answer's Date header (the host's client takes
// the server from the config, never from the machine's kubeconfig). The
// proxy passes the node's identity on as a front proxy (the requestheader
// authentication the aggregation layer uses), so every other check still
// sees the node. The agent's own config is left alone: its drift repair
// would render the proxy into the kubelet's files.
func (e *env) debugClockSkew(t *testing.T) {
	proxy := e.skewProxy(t)
	conf, err := os.ReadFile(e.h.Path(hostConfig))
	if err != nil {
		t.Fatal(err)
	}
	server := strings.TrimPrefix(e.cp.Server, "https://")
	if !strings.Contains(string(conf), server) {
		t.Fatalf("%s does not name %s", hostConfig, server)
	}
	const skewConfig = "/etc/aks-flex-node/skew-config.json"
	must(t, e.h.WriteFile(skewConfig, []byte(strings.ReplaceAll(string(conf), server, strings.TrimPrefix(proxy, "https://"))), 0o600))
	defer func() { _ = os.Remove(e.h.Path(skewConfig)) }()
	e.expectErrorWith(t, []string{"--config", skewConfig}, "clock-skew", "10m", "behind", "time synchronisation")
}

// skewProxy serves, on this machine's end of the test's link, a TLS
// proxy to the API server that the host can reach and trusts (the
// cluster CA signed its certificate), and returns its URL.
func (e *env) skewProxy(t *testing.T) string {
	ln, err := net.Listen("tcp", net.JoinHostPort(e.net.Outer, "0"))
	if err != nil {
		t.Fatal(err)
	}
	servingPEM, servingKey := e.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "day2-skew-proxy"},
		IPAddresses: []net.IP{net.ParseIP(e.net.Outer)},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	serving, err := tls.X509KeyPair(servingPEM, servingKey)
	if err != nil {
		t.Fatal(err)
	}
	pkiDir := filepath.Join(e.cp.WorkDir, "pki")
	front, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, "front-proxy-client.crt"), filepath.Join(pkiDir, "front-proxy-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(e.cp.CAPEM)
	upstream, err := url.Parse(e.cp.Server)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			for k := range r.Out.Header {
				if strings.HasPrefix(strings.ToLower(k), "x-remote-") {
					r.Out.Header.Del(k)
				}
			}
			if tc := r.In.TLS; tc != nil && len(tc.PeerCertificates) > 0 {
				c := tc.PeerCertificates[0]
				r.Out.Header.Set("X-Remote-User", c.Subject.CommonName)
				for _, o := range c.Subject.Organization {
					r.Out.Header.Add("X-Remote-Group", o)
				}
			}
		},
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{front}}},
		ModifyResponse: func(resp *http.Response) error {
			if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
				resp.Header.Set("Date", d.Add(skew).UTC().Format(http.TimeFormat))
			}
			return nil
		},
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second, TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{serving}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert,
	}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String()
}
