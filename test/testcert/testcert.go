// Package testcert makes the throwaway TLS the tests' own servers present
// (the fake cloud services, a file server on a test host's loopback): a
// CA made for the occasion and a serving certificate it signed, so a
// client trusts the server only when it is given that CA.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"time"
)

// Spec names the CA and the server, and where the server is reached.
type Spec struct {
	CA, Server string // common names
	IPs        []net.IP
	DNSNames   []string
	// Valid is how long both stay valid from now (they are valid from an
	// hour ago, for a host whose clock is a little behind).
	Valid time.Duration
}

// Serving is the CA (PEM) and the serving certificate s asks for.
func Serving(s Spec) (caPEM []byte, cert tls.Certificate, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: s.CA},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(s.Valid),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, cert, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, cert, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: s.Server},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(s.Valid),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: s.IPs, DNSNames: s.DNSNames,
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, cert, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
