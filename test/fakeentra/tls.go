package fakeentra

import (
	"crypto/tls"
	"net"
	"time"

	"github.com/Azure/aks-flex-node/test/testcert"
)

// serving is a CA and a serving certificate it signed for some IPs and
// names, as a real tenant's TLS would chain to a public root.
type serving struct {
	caPEM []byte
	cert  tls.Certificate
}

func newServing(ips []net.IP, names []string) (*serving, error) {
	caPEM, cert, err := testcert.Serving(testcert.Spec{CA: "fake Entra test CA", Server: "login.fake-entra.test", IPs: ips, DNSNames: names, Valid: 48 * time.Hour})
	if err != nil {
		return nil, err
	}
	return &serving{caPEM: caPEM, cert: cert}, nil
}
