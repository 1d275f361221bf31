package controlplane

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
)

func TestPKI(t *testing.T) {
	dir := t.TempDir()
	p, err := newPKI(dir, net.ParseIP("10.10.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.ca.cert)

	serving := loadCert(t, p.apiserverCert)
	for _, name := range []string{"kubernetes", "kubernetes.default.svc", "localhost"} {
		if _, err := serving.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("serving cert for %s: %v", name, err)
		}
	}
	for _, ip := range []string{"127.0.0.1", serviceIP, "10.10.0.1"} {
		if err := serving.VerifyHostname(ip); err != nil {
			t.Errorf("serving cert for %s: %v", ip, err)
		}
	}
	if err := serving.VerifyHostname("10.10.0.2"); err == nil {
		t.Error("serving cert accepts 10.10.0.2, which it was not issued for")
	}

	for _, c := range []struct {
		kp   *keyPair
		user string
		org  string
	}{
		{p.admin, "kubernetes-admin", "system:masters"},
		{p.controllerManager, "system:kube-controller-manager", ""},
		{p.scheduler, "system:kube-scheduler", ""},
	} {
		if _, err := c.kp.cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: %v", c.user, err)
		}
		if got := c.kp.cert.Subject.CommonName; got != c.user {
			t.Errorf("client cert CN = %q, want %q", got, c.user)
		}
		if c.org != "" && !slices.Contains(c.kp.cert.Subject.Organization, c.org) {
			t.Errorf("%s: O = %v, want %s", c.user, c.kp.cert.Subject.Organization, c.org)
		}
	}

	// The components parse these with keyutil; check they can.
	if _, err := keyutil.PrivateKeyFromFile(p.saKeyFile); err != nil {
		t.Errorf("sa.key: %v", err)
	}
	if _, err := keyutil.PublicKeysFromFile(p.saPubFile); err != nil {
		t.Errorf("sa.pub: %v", err)
	}
	if _, err := keyutil.PrivateKeyFromFile(p.caKeyFile); err != nil {
		t.Errorf("ca.key: %v", err)
	}
	if st, err := os.Stat(p.caKeyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("ca.key mode: %v %v", st.Mode(), err)
	}
}

func TestKubeconfigs(t *testing.T) {
	p, err := newPKI(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := writeKubeconfig(file, "https://127.0.0.1:6443", p.ca.certPEM, p.admin); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || len(cfg.CertData) == 0 || len(cfg.KeyData) == 0 || len(cfg.CAData) == 0 {
		t.Errorf("admin kubeconfig incomplete: host %q, cert %d, key %d, ca %d bytes", cfg.Host, len(cfg.CertData), len(cfg.KeyData), len(cfg.CAData))
	}

	info, err := clusterInfoKubeconfig("https://10.0.0.1:6443", p.ca.certPEM)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := clientcmd.Load(info)
	if err != nil {
		t.Fatal(err)
	}
	if c := parsed.Clusters[""]; c == nil || c.Server != "https://10.0.0.1:6443" || string(c.CertificateAuthorityData) != string(p.ca.certPEM) {
		t.Errorf("cluster-info kubeconfig: %+v", parsed.Clusters)
	}
}

func TestNewBootstrapToken(t *testing.T) {
	id, secret, err := newBootstrapToken()
	if err != nil {
		t.Fatal(err)
	}
	if !bootstraputil.IsValidBootstrapToken(id+"."+secret) || len(id) != 6 || len(secret) != 16 {
		t.Errorf("token %s.%s is not a valid bootstrap token", id, secret)
	}
	if !bootstraputil.BootstrapGroupRegexp.MatchString(BootstrapGroup) || BootstrapGroup == bootstrapapi.BootstrapDefaultGroup {
		t.Errorf("BootstrapGroup %q is not a valid extra group", BootstrapGroup)
	}
}

func loadCert(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	certs, err := certutil.CertsFromFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(certs) != 1 {
		t.Fatalf("%s holds %d certificates, want 1", file, len(certs))
	}
	return certs[0]
}
