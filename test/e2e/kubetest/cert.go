package kubetest

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/test/testcert"
)

// LoopbackServingCert is a throwaway CA (PEM, for a host's trust store)
// and a serving certificate for 127.0.0.1 it signed, valid for a day:
// what a test's https server on a host's loopback needs.
func LoopbackServingCert(t testing.TB) ([]byte, tls.Certificate) {
	t.Helper()
	caPEM, cert, err := testcert.Serving(testcert.Spec{CA: "aks-flex-node e2e CA", Server: "127.0.0.1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Valid: 24 * time.Hour})
	if err != nil {
		t.Fatalf("test certificate: %v", err)
	}
	return caPEM, cert
}
