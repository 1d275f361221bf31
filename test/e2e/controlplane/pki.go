package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// serviceIP is the first address of serviceCIDR: the `kubernetes` Service,
// which in-cluster clients dial, so it must be in the serving certificate.
const (
	serviceCIDR = "10.96.0.0/12"
	serviceIP   = "10.96.0.1"
)

// keyPair is a certificate and its private key, parsed and PEM-encoded.
type keyPair struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// certSpec is what differs between the certificates the control plane uses.
type certSpec struct {
	commonName string
	orgs       []string
	dnsNames   []string
	ips        []net.IP
	usages     []x509.ExtKeyUsage
}

// newKey returns a P-256 key: every component accepts ECDSA and it is much
// cheaper to generate than RSA, which matters when each test makes a PKI.
func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// validity backdates NotBefore so a clock that is slightly behind (a test
// machine, a freshly booted container) still accepts the certificate.
func validity() (time.Time, time.Time) {
	now := time.Now()
	return now.Add(-time.Hour), now.Add(365 * 24 * time.Hour)
}

func newCA(commonName string) (*keyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("generate key for CA %s: %w", commonName, err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	notBefore, notAfter := validity()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	return sign(tmpl, tmpl, key, key)
}

// issue signs a leaf certificate for spec with ca.
func (ca *keyPair) issue(spec certSpec) (*keyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("generate key for %s: %w", spec.commonName, err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	notBefore, notAfter := validity()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.commonName, Organization: spec.orgs},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  spec.usages,
		DNSNames:     spec.dnsNames,
		IPAddresses:  spec.ips,
	}
	return sign(tmpl, ca.cert, key, ca.key)
}

func sign(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, signer crypto.Signer) (*keyPair, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		return nil, fmt.Errorf("sign certificate %s: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  keyPEM,
	}, nil
}

// write stores the pair as <dir>/<name>.crt and <dir>/<name>.key and returns
// the two paths.
func (kp *keyPair) write(dir, name string) (certFile, keyFile string, err error) {
	certFile = filepath.Join(dir, name+".crt")
	keyFile = filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, kp.certPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, kp.keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// pki is every credential the control plane components are started with.
type pki struct {
	dir string

	ca, frontProxyCA *keyPair

	caFile, caKeyFile           string
	frontProxyCAFile            string
	apiserverCert, apiserverKey string
	kubeletClientCert           string
	kubeletClientKey            string
	frontProxyClientCert        string
	frontProxyClientKey         string
	saKeyFile, saPubFile        string

	admin, controllerManager, scheduler *keyPair
}

// servingSANs are the names and addresses clients use to reach the
// apiserver: loopback for the harness, the advertise address for nodes, and
// the in-cluster Service names and IP.
func servingSANs(advertise net.IP) ([]string, []net.IP) {
	dns := []string{
		"localhost",
		"kubernetes",
		"kubernetes.default",
		"kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local",
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceIP)}
	if advertise != nil && !advertise.IsLoopback() && !advertise.IsUnspecified() {
		ips = append(ips, advertise)
	}
	return dns, ips
}

// newPKI generates and writes the cluster's credentials under dir.
func newPKI(dir string, advertise net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{dir: dir}
	var err error
	if p.ca, err = newCA("kubernetes"); err != nil {
		return nil, err
	}
	if p.caFile, p.caKeyFile, err = p.ca.write(dir, "ca"); err != nil {
		return nil, err
	}
	if p.frontProxyCA, err = newCA("front-proxy-ca"); err != nil {
		return nil, err
	}
	if p.frontProxyCAFile, _, err = p.frontProxyCA.write(dir, "front-proxy-ca"); err != nil {
		return nil, err
	}

	dns, ips := servingSANs(advertise)
	serving, err := p.ca.issue(certSpec{
		commonName: "kube-apiserver",
		dnsNames:   dns,
		ips:        ips,
		usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, err
	}
	if p.apiserverCert, p.apiserverKey, err = serving.write(dir, "apiserver"); err != nil {
		return nil, err
	}

	clientUsage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	// The apiserver uses this to reach kubelets for logs, exec and port-forward.
	kubeletClient, err := p.ca.issue(certSpec{commonName: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, usages: clientUsage})
	if err != nil {
		return nil, err
	}
	if p.kubeletClientCert, p.kubeletClientKey, err = kubeletClient.write(dir, "apiserver-kubelet-client"); err != nil {
		return nil, err
	}
	frontProxyClient, err := p.frontProxyCA.issue(certSpec{commonName: "front-proxy-client", usages: clientUsage})
	if err != nil {
		return nil, err
	}
	if p.frontProxyClientCert, p.frontProxyClientKey, err = frontProxyClient.write(dir, "front-proxy-client"); err != nil {
		return nil, err
	}
	if p.admin, err = p.ca.issue(certSpec{commonName: "kubernetes-admin", orgs: []string{"system:masters"}, usages: clientUsage}); err != nil {
		return nil, err
	}
	if _, _, err = p.admin.write(dir, "admin"); err != nil {
		return nil, err
	}
	// The bootstrap RBAC policy binds these user names to their roles.
	if p.controllerManager, err = p.ca.issue(certSpec{commonName: "system:kube-controller-manager", usages: clientUsage}); err != nil {
		return nil, err
	}
	if p.scheduler, err = p.ca.issue(certSpec{commonName: "system:kube-scheduler", usages: clientUsage}); err != nil {
		return nil, err
	}

	saKey, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("generate service account key: %w", err)
	}
	saKeyPEM, err := encodeKey(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	p.saKeyFile = filepath.Join(dir, "sa.key")
	p.saPubFile = filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(p.saKeyFile, saKeyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saPubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}), 0o644); err != nil {
		return nil, err
	}
	return p, nil
}

func writeKubeconfig(file, server string, caPEM []byte, kp *keyPair) error {
	user := kp.cert.Subject.CommonName
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubernetes"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.certPEM, ClientKeyData: kp.keyPEM}
	cfg.Contexts[user+"@kubernetes"] = &clientcmdapi.Context{Cluster: "kubernetes", AuthInfo: user}
	cfg.CurrentContext = user + "@kubernetes"
	if err := clientcmd.WriteToFile(*cfg, file); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", file, err)
	}
	return nil
}
