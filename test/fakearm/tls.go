package fakearm

import (
	"crypto/tls"
	"net"
	"time"

	"github.com/Azure/aks-flex-node/test/testcert"
)

// serving is the fake's own CA and a certificate it signed for the
// listener's address, so a client trusts the fake only when told to.
func serving(ip net.IP) (caPEM []byte, cert tls.Certificate, err error) {
	return testcert.Serving(testcert.Spec{CA: "fakearm CA", Server: "fakearm", IPs: []net.IP{ip}, DNSNames: []string{"localhost"}, Valid: 24 * time.Hour})
}
