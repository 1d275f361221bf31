package node

import (
	"fmt"
	"os/exec"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/genfile"
	"github.com/Azure/aks-flex-node/internal/node/nodedirs"
)

// kube-proxy inside the machine, for a node with networking.kubeProxy
// "agent": the bundle's binary (installed next to the kubelet), its
// KubeProxyConfiguration and its unit.
//
// It signs in with the kubelet's own kubeconfig (KubeletKubeconf): the
// node's identity, the client certificate the kubelet rotates (client-go
// reloads a certificate file when it changes), whatever credential
// bootstrapped it. A credential of its own would be one more secret to issue, store,
// rotate and revoke for the same machine; the price is that the node's
// identity must be allowed what kube-proxy reads (endpointslices), which
// `cluster prepare` grants (clusterprep.NodeProxierBinding).
const (
	KubeProxyBinary     = nodedirs.Bin + "/kube-proxy"
	KubeProxyConfigFile = "/var/lib/kube-proxy/config.yaml"
	KubeProxyUnitName   = "kube-proxy.service"
	KubeProxyUnitFile   = unitDir + "/" + KubeProxyUnitName
)

// kubeProxyFiles are the files a node with the agent's kube-proxy has and
// one without it must not: reset removes the machine, Write these.
var kubeProxyFiles = []string{wantsDir + "/" + KubeProxyUnitName, KubeProxyUnitFile, KubeProxyConfigFile}

// lookPath finds host commands for DetectKubeProxyMode; tests replace it.
var lookPath = exec.LookPath

// DetectKubeProxyMode is the mode of the agent's kube-proxy when
// networking.kubeProxyMode leaves it to the host: nftables on a host that
// has nft and no iptables (one whose firewall is nftables alone), iptables
// everywhere else, the mode every kube-proxy release supports.
func DetectKubeProxyMode() string {
	_, nftErr := lookPath("nft")
	_, iptErr := lookPath("iptables")
	if nftErr == nil && iptErr != nil {
		return config.KubeProxyNFTables
	}
	return config.KubeProxyIPTables
}

// kubeProxyMode is the mode the config asks for, else the host's.
func kubeProxyMode(c *config.Config, o Options) string {
	if m := c.Networking.KubeProxyMode; m != "" {
		return m
	}
	if o.KubeProxyMode != "" {
		return o.KubeProxyMode
	}
	return config.KubeProxyIPTables
}

// renderKubeProxyConfig renders the KubeProxyConfiguration. Traffic is
// this node's own ("local", not masqueraded on its way to a Service) when
// it comes in on the node's bridge: those are exactly this node's pods,
// whichever way the node got its pod CIDR (networking.podCIDR or the
// Node's), so nothing here waits for the pod CIDR and nothing needs the
// cluster-wide pod range, which a node is not told (the controller
// manager's --cluster-cidr); clusterCIDR is read only in kube-proxy's
// ClusterCIDR mode and is left empty. kube-proxy changes no host sysctl:
// no localhost NodePorts (route_localnet) and the host's conntrack limits
// and timeouts as they are (0 leaves each alone).
func renderKubeProxyConfig(in *inputs) ([]byte, error) {
	zero, f := int32(0), false
	noTimeout := metav1.Duration{Duration: 0 * time.Second}
	kp := kubeproxyv1alpha1.KubeProxyConfiguration{
		ClientConnection: componentbaseconfigv1alpha1.ClientConnectionConfiguration{Kubeconfig: KubeletKubeconf},
		HostnameOverride: in.nodeName,
		Mode:             kubeproxyv1alpha1.ProxyMode(in.proxyMode),
		IPTables:         kubeproxyv1alpha1.KubeProxyIPTablesConfiguration{LocalhostNodePorts: &f},
		DetectLocalMode:  kubeproxyv1alpha1.LocalMode("BridgeInterface"),
		DetectLocal:      kubeproxyv1alpha1.DetectLocalConfiguration{BridgeInterface: BridgeName},
		Conntrack: kubeproxyv1alpha1.KubeProxyConntrackConfiguration{
			MaxPerCore: &zero, Min: &zero, TCPEstablishedTimeout: &noTimeout, TCPCloseWaitTimeout: &noTimeout,
		},
	}
	kp.APIVersion = kubeproxyv1alpha1.SchemeGroupVersion.String()
	kp.Kind = "KubeProxyConfiguration"
	data, err := yaml.Marshal(&kp)
	if err != nil {
		return nil, err
	}
	return genfile.WithHeader(data), nil
}

// renderKubeProxyUnit renders kube-proxy.service: everything it takes is
// in its config file.
func renderKubeProxyUnit(*inputs) ([]byte, error) {
	return genfile.Render(genfile.KubeProxyUnit, struct{ KubeletUnit, Binary, ConfigFile string }{
		KubeletUnitName, KubeProxyBinary, KubeProxyConfigFile,
	})
}

// checkKubeProxyMode checks a detected or given mode.
func checkKubeProxyMode(m string) error {
	if m != "" && m != config.KubeProxyIPTables && m != config.KubeProxyNFTables {
		return fmt.Errorf("kube-proxy mode %q: must be iptables or nftables", m)
	}
	return nil
}
