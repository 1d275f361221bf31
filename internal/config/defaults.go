package config

import (
	"os"
	"strings"

	"github.com/Azure/aks-flex-node/internal/layout"
)

// Defaults are the values a key takes when the file leaves it out. They are
// applied in exactly one place, ApplyDefaults, and `config view` shows them.
const (
	DefaultCloud                    = "AzurePublicCloud"
	DefaultLogLevel                 = "info"
	DefaultMachineReconcileInterval = "1m"
	DefaultKubernetesVersion        = "1.35.0"
	DefaultContainerdVersion        = "1.7.28"
	DefaultRuncVersion              = "1.3.0"
	DefaultSandboxImage             = "mcr.microsoft.com/oss/kubernetes/pause:3.10"
	DefaultDNSServiceIP             = "10.0.0.10"
	DefaultCNIVersion               = "1.6.2"
	DefaultNetworkMode              = NetworkModeBridge
	DefaultMaxPods                  = 110
	DefaultKubeletVerbosity         = 2
	DefaultImageGCHighThreshold     = 85
	DefaultImageGCLowThreshold      = 80
	// DefaultMachineAPIVersion is the AKS machine API's api-version:
	// the preview version upstream AKS Flex Node's machine client
	// speaks (armcontainerservice v8 beta).
	DefaultMachineAPIVersion = "2025-10-02-preview"
	// DefaultTargetAgentPoolName is upstream's pool of flex nodes.
	DefaultTargetAgentPoolName = "aksflexnodes"
)

// Hostname is how the default node name is found; tests replace it.
var Hostname = os.Hostname

// ApplyDefaults fills every unset key with its default.
func ApplyDefaults(c *Config) {
	setStr := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	setInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setStr(&c.Azure.Cloud, DefaultCloud)
	if c.Azure.ARM() {
		setStr(&c.Azure.TargetAgentPoolName, DefaultTargetAgentPoolName)
		setStr(&c.Azure.MachineAPIVersion, DefaultMachineAPIVersion)
	}
	setStr(&c.Agent.LogLevel, DefaultLogLevel)
	setStr(&c.Agent.LogDir, layout.DefaultLogDir)
	setStr(&c.Agent.MachineReconcileInterval, DefaultMachineReconcileInterval)
	if c.Agent.NodeName == "" {
		if h, err := Hostname(); err == nil {
			// Kubernetes node names are lowercase; hostnames often are not.
			c.Agent.NodeName = strings.ToLower(h)
		}
	}
	c.Components.Kubernetes = strings.TrimPrefix(c.Components.Kubernetes, "v")
	setStr(&c.Components.Kubernetes, DefaultKubernetesVersion)
	setStr(&c.Components.Containerd, DefaultContainerdVersion)
	setStr(&c.Components.Runc, DefaultRuncVersion)
	setStr(&c.Components.SandboxImage, DefaultSandboxImage)
	setStr(&c.Networking.DNSServiceIP, DefaultDNSServiceIP)
	setStr(&c.Networking.CNIVersion, DefaultCNIVersion)
	setStr(&c.Networking.Mode, DefaultNetworkMode)
	setStr(&c.Networking.KubeProxy, KubeProxyDaemonSet)
	setInt(&c.Node.MaxPods, DefaultMaxPods)
	if c.Node.Kubelet.Verbosity == nil {
		v := DefaultKubeletVerbosity
		c.Node.Kubelet.Verbosity = &v
	}
	setInt(&c.Node.Kubelet.ImageGCHighThreshold, DefaultImageGCHighThreshold)
	setInt(&c.Node.Kubelet.ImageGCLowThreshold, DefaultImageGCLowThreshold)
}
