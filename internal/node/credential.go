package node

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

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

// maxKubeconfigFile bounds each file hostKubeconfig reads.
const maxKubeconfigFile = 1 << 20

// HostClientConfig is the node's own credential, for use from the host:
// the kubelet's kubeconfig in the machine at machineRoot, with what it
// names inlined. What the host does to the Node object (wait for Ready,
// debug, Events) it does as the node, which is what the Node authorizer
// lets it do and nothing more.
func HostClientConfig(machineRoot string) (*rest.Config, error) {
	return hostKubeconfig(KubeletKubeconf, machineRoot)
}

// ClientConfig is the node's own credential for use from the host, for
// the node configured by c on layout l, whose machine is at machineRoot:
// HostClientConfig, whatever the node bootstrapped with. With an Azure
// identity too the kubelet holds a client certificate for
// system:node:<name> after its TLS bootstrap, and the host acts as that
// node, never as the identity, which the cluster lets do nothing but ask
// for the certificate.
func ClientConfig(c *config.Config, l layout.Layout, machineRoot string) (*rest.Config, error) {
	return HostClientConfig(machineRoot)
}

// hostKubeconfig loads the kubelet's kubeconfig, at path inside the
// machine at machineRoot, for use from the host. It and the certificate
// paths in it are resolved inside the machine (the current-certificate
// link is absolute there) and read confined to its rootfs, regular files
// only: the running machine owns those files, and a link or a named pipe
// there must not make the agent read a host file or hang. The
// certificates are inlined; nothing is written to disk.
func hostKubeconfig(path, machineRoot string) (*rest.Config, error) {
	read := func(p string) ([]byte, error) {
		b, err := fsutil.ReadFileIn(machineRoot, p, maxKubeconfigFile)
		if err != nil {
			return nil, fmt.Errorf("read %s in machine %s: %w", p, machineRoot, err)
		}
		return b, nil
	}
	data, err := read(path)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("load %s in machine %s: %w", path, machineRoot, err)
	}
	for _, ai := range cfg.AuthInfos {
		if ai.ClientCertificate != "" {
			if ai.ClientCertificateData, err = read(ai.ClientCertificate); err != nil {
				return nil, err
			}
			ai.ClientCertificate = ""
		}
		if ai.ClientKey != "" {
			if ai.ClientKeyData, err = read(ai.ClientKey); err != nil {
				return nil, err
			}
			ai.ClientKey = ""
		}
	}
	for _, c := range cfg.Clusters {
		if c.CertificateAuthority != "" {
			if c.CertificateAuthorityData, err = read(c.CertificateAuthority); err != nil {
				return nil, err
			}
			c.CertificateAuthority = ""
		}
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rc, nil
}
