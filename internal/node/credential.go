package node

import (
	"crypto/tls"
	"fmt"

	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// KubeletPKIDir holds the kubelet's client and serving certificates;
// KubeletClientCert is the link the kubelet points at its current client
// certificate (certificate and key in one PEM file) once its TLS
// bootstrap, and each rotation, is done.
const (
	KubeletPKIDir     = "/var/lib/kubelet/pki"
	KubeletClientCert = KubeletPKIDir + "/kubelet-client-current.pem"
)

// maxClientCert bounds the client certificate file the host reads from
// the machine (a certificate chain and its key are a few KiB).
const maxClientCert = 1 << 20

// hostClientConfig is the node's own credential, for use from the host,
// for the node configured by c whose machine is at machineRoot. The API
// server and the CA it is checked against are the config's
// (node.kubelet.clusterFQDN, node.kubelet.caCertData, the README's CA
// pin); only the client certificate and key come from the machine: the
// bytes of KubeletClientCert, the link the kubelet keeps at its current
// certificate, resolved inside the machine and read confined to its
// rootfs, a regular file only. The machine's kubelet.conf is not read:
// the running machine owns it, and an exec entry there would run a
// command on the host as root, a tokenFile would make the host read and
// send one of its own files, and a server or insecure-skip-tls-verify
// would send the node's credential where the machine chose. What the
// host does to the Node object (wait for Ready, debug, Events) it does
// as the node, which is what the Node authorizer lets it do.
func hostClientConfig(c *config.Config, machineRoot string) (*rest.Config, error) {
	if c == nil || c.Node.Kubelet.ClusterFQDN == "" {
		return nil, fmt.Errorf("the host's client to the API server takes the server and CA from the config (node.kubelet.clusterFQDN, node.kubelet.caCertData), and there is none; the kubelet's client certificate is %s in machine %s", KubeletClientCert, machineRoot)
	}
	server, err := config.ServerURL(c.Node.Kubelet.ClusterFQDN)
	if err != nil {
		return nil, fmt.Errorf("node.kubelet.clusterFQDN: %w", err)
	}
	ca := c.CAPEM()
	if len(ca) == 0 {
		return nil, fmt.Errorf("node.kubelet.caCertData is empty: the host's client checks the API server against it")
	}
	pem, err := fsutil.ReadFileIn(machineRoot, KubeletClientCert, maxClientCert)
	if err != nil {
		return nil, fmt.Errorf("read the kubelet's client certificate %s in machine %s: %w", KubeletClientCert, machineRoot, err)
	}
	// Both halves are in the one file; checking the pair here says which
	// file is wrong, where the first request would only fail its TLS
	// handshake. The error names no byte of the key.
	if _, err := tls.X509KeyPair(pem, pem); err != nil {
		return nil, fmt.Errorf("the kubelet's client certificate %s in machine %s is not a certificate and key in PEM: %w", KubeletClientCert, machineRoot, err)
	}
	return &rest.Config{
		Host:            server,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca, CertData: pem, KeyData: pem},
	}, nil
}

// ClientConfig is the node's own credential for use from the host, for
// the node configured by c on layout l, whose machine is at machineRoot:
// the kubelet's client certificate with the config's server and CA
// (hostClientConfig), whatever the node bootstrapped with. With an Azure
// identity too the kubelet holds a client certificate for
// system:node:<name> after its TLS bootstrap, and the host acts as that
// node, never as the identity, which the cluster lets do nothing but ask
// for the certificate. With c nil there is none.
func ClientConfig(c *config.Config, l layout.Layout, machineRoot string) (*rest.Config, error) {
	return hostClientConfig(c, machineRoot)
}
