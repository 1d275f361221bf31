package diag

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
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

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/daemon"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/state"
)

// fakeNode is a joined host in a temp root: the applied state, a machine
// rootfs with the kubelet's kubeconfig, certificate, config and a CNI
// config, an API server (TLS, verifying the node's client certificate as
// the real one does), systemd's answers, the machine's routes in a fake
// /proc, and the agent's /healthz on its socket.
type fakeNode struct {
	t       *testing.T
	env     *Env
	root    string
	mroot   string
	ca      *x509.Certificate
	caKey   *ecdsa.PrivateKey
	server  *httptest.Server
	health  *daemon.Health
	mu      sync.Mutex
	units   map[string]string // unit -> ActiveState
	skew    time.Duration     // added to the server's Date
	ready   string            // the Node's Ready status
	podCIDR string
}

const (
	testNode   = "node-1"
	testLeader = 4242
)

func newFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	root := t.TempDir()
	l, err := layout.New(root, "/opt/aks-flex-node", "")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{t: t, root: root, mroot: l.OnRoot(l.MachineDir(layout.MachineBlue)), ready: "True", podCIDR: "10.244.0.0/24",
		units: map[string]string{"systemd-nspawn@kube1.service": "active", layout.AgentUnitName: "active", node.ContainerdUnitName: "active", node.KubeletUnitName: "active"}}
	f.ca, f.caKey = newCA(t)
	f.startServer()
	state := l.OnRoot(l.StateDir())
	mustWrite(t, filepath.Join(state, "joined"), "")
	writeApplied(t, state)
	f.writeMachine()
	f.writeCert(time.Now().Add(-time.Hour), time.Now().Add(365*24*time.Hour))
	f.writeRoutes(true)
	f.health = daemon.NewHealth()
	ln, err := net.Listen("unix", l.OnRoot(l.AgentSocket()))
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: f.health}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	// The config names the API server and its CA; the machine holds only
	// the kubelet's certificate for the host.
	c := &config.Config{}
	c.Node.Kubelet.ClusterFQDN = f.server.URL
	c.Node.Kubelet.CACertData = base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.ca.Raw}))
	f.env = &Env{Layout: l, Config: c, Exec: f.exec, ProcDir: filepath.Join(root, "proc")}
	return f
}

func writeApplied(t *testing.T, dir string) {
	t.Helper()
	if _, err := state.OpenDir(dir).SaveApplied(state.Applied{NodeName: testNode, Machine: layout.MachineBlue, KubernetesVersion: "1.35.4", ImageDigest: "sha256:abc", AgentVersion: "v1.0.0", AppliedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}

func (f *fakeNode) issue(tmpl *x509.Certificate) (certPEM, keyPEM []byte) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.ca, &key.PublicKey, f.caKey)
	if err != nil {
		f.t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

// startServer is the API server: it verifies the client certificate
// against the cluster CA (an expired one is 401, as kube-apiserver
// answers), says who it is, and serves the Node and its Lease.
func (f *fakeNode) startServer() {
	certPEM, keyPEM := f.issue(&x509.Certificate{Subject: pkix.Name{CommonName: "kube-apiserver"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		f.t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequestClientCert}
	s.Config.ErrorLog = nil
	s.StartTLS()
	f.t.Cleanup(s.Close)
	f.server = s
}

func (f *fakeNode) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	skew, ready, cidr := f.skew, f.ready, f.podCIDR
	f.mu.Unlock()
	w.Header().Set("Date", time.Now().Add(skew).UTC().Format(http.TimeFormat))
	if len(r.TLS.PeerCertificates) == 0 {
		http.Error(w, `{"message":"Unauthorized"}`, http.StatusUnauthorized)
		return
	}
	c := r.TLS.PeerCertificates[0]
	pool := x509.NewCertPool()
	pool.AddCert(f.ca)
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		http.Error(w, `{"message":"Unauthorized"}`, http.StatusUnauthorized)
		return
	}
	now := time.Now().UTC().Format(time.RFC3339)
	switch {
	case r.URL.Path == "/apis/authentication.k8s.io/v1/selfsubjectreviews":
		json.NewEncoder(w).Encode(map[string]any{"status": map[string]any{"userInfo": map[string]any{"username": c.Subject.CommonName, "groups": c.Subject.Organization}}})
	case r.URL.Path == "/api/v1/nodes/"+testNode:
		json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"name": testNode}, "spec": map[string]any{"podCIDR": cidr, "podCIDRs": []string{cidr}},
			"status": map[string]any{"conditions": []map[string]any{
				{"type": "MemoryPressure", "status": "False"}, {"type": "DiskPressure", "status": "False"},
				{"type": "Ready", "status": ready, "reason": "KubeletReady", "message": "kubelet is posting ready status"}}}})
	case r.URL.Path == "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"+testNode:
		fmt.Fprintf(w, `{"metadata":{"name":%q},"spec":{"renewTime":%q}}`, testNode, now)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeNode) writeMachine() {
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.ca.Raw})
	mustWrite(f.t, filepath.Join(f.mroot, node.KubeletKubeconf), fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: u, user: {client-certificate: %s, client-key: %s}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, f.server.URL, b64(caPEM), node.KubeletClientCert, node.KubeletClientCert))
	// Thresholds far from what the build machine's disk has free: the
	// tests are about the checks, not about this disk.
	f.writeKubeletConfig("1%", "1Mi")
	mustWrite(f.t, filepath.Join(f.mroot, node.CNIConfFile), `{"cniVersion":"1.0.0","name":"aks-flex-node","plugins":[{"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]]}},{"type":"portmap"}]}`)
	for _, d := range []string{"var/lib/kubelet", "var/lib/containerd"} {
		os.MkdirAll(filepath.Join(f.mroot, d), 0o755)
	}
}

func (f *fakeNode) writeKubeletConfig(nodefsAvailable, imagefsAvailable string) {
	mustWrite(f.t, filepath.Join(f.mroot, node.KubeletConfigFile), fmt.Sprintf(`# generated
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
rotateCertificates: true
imageGCHighThresholdPercent: 100
evictionHard:
  nodefs.available: %q
  nodefs.inodesFree: "1%%"
  imagefs.available: %q
`, nodefsAvailable, imagefsAvailable))
}

// writeCert puts a client certificate for the node, valid from nb to na,
// where the kubelet links it.
func (f *fakeNode) writeCert(nb, na time.Time) {
	certPEM, keyPEM := f.issue(&x509.Certificate{Subject: pkix.Name{CommonName: "system:node:" + testNode, Organization: []string{"system:nodes"}},
		NotBefore: nb, NotAfter: na, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	dated := fmt.Sprintf("%s/kubelet-client-%d.pem", node.KubeletPKIDir, time.Now().UnixNano())
	mustWrite(f.t, filepath.Join(f.mroot, dated), string(certPEM)+string(keyPEM))
	link := filepath.Join(f.mroot, node.KubeletClientCert)
	os.Remove(link)
	if err := os.Symlink(dated, link); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeNode) writeRoutes(bridge bool) {
	routes := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"eth0\t00000000\t0102000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
	if bridge {
		routes += "cni0\t0000F40A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
	}
	mustWrite(f.t, filepath.Join(f.root, "proc", fmt.Sprint(testLeader), "net", "route"), routes)
}

// exec answers systemctl, machinectl and nsenter as systemd does.
func (f *fakeNode) exec(_ context.Context, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case name == "machinectl" && args[0] == "show":
		return []byte(fmt.Sprint(testLeader)), nil
	case name == "nsenter":
		args = args[4:] // -t PID -a --
		fallthrough
	case name == "systemctl" && args[0] == "show":
		var b strings.Builder
		for _, u := range args[1:] {
			if strings.HasPrefix(u, "-") {
				break
			}
			sub := map[string]string{"active": "running", "inactive": "dead"}[f.units[u]]
			fmt.Fprintf(&b, "Id=%s\nActiveState=%s\nSubState=%s\nResult=success\nNRestarts=0\nStateChangeTimestamp=Thu 2025-01-02 03:04:05 UTC\n\n", u, f.units[u], sub)
		}
		return []byte(b.String()), nil
	}
	return nil, fmt.Errorf("unexpected command %s %q", name, args)
}

func (f *fakeNode) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}
