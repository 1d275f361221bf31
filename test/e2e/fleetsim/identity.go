package fleetsim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"time"

	"k8s.io/client-go/rest"
)

// issuer signs the simulated nodes' client certificates with the cluster
// CA, the key the controller-manager's CSR signer uses: each node gets
// the certificate a kubelet's TLS bootstrap ends with (CN system:node:NAME,
// O system:nodes), so the API server authenticates it as that node and
// the Node authorizer, NodeRestriction and RBAC decide on it as they do
// for a real one. The CSR round trip itself is join-time cost, which
// make bench-fleet measures on real hosts; the simulator measures the
// fleet at rest and in a rollout.
type issuer struct {
	ca  *x509.Certificate
	key any
}

func newIssuer(caFile, keyFile string) (*issuer, error) {
	certPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("the cluster CA's certificate or key is not PEM")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		k8, err8 := x509.ParsePKCS8PrivateKey(kb.Bytes)
		if err8 != nil {
			return nil, fmt.Errorf("the cluster CA's key: %w", err)
		}
		return &issuer{ca: ca, key: k8}, nil
	}
	return &issuer{ca: ca, key: key}, nil
}

// nodeConfig is a client config for server that signs in as Node name with
// a certificate of its own.
func (is *issuer) nodeConfig(server string, caPEM []byte, name string) (*rest.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}},
		NotBefore:    now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, is.ca, &key.PublicKey, is.key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &rest.Config{Host: server, TLSClientConfig: rest.TLSClientConfig{
		CAData:   caPEM,
		CertData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyData:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}}, nil
}
