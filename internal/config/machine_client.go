package config

import (
	"net/url"
	"path"
	"strings"
)

// Machine client modes (agent.machineClient.mode), as upstream names them.
const (
	MachineClientARM       = "arm"
	MachineClientInCluster = "in-cluster"
	// machineClientE2E is upstream's mode that reads the Machine from a
	// local file for its tests; refused here.
	machineClientE2E = "e2e"
)

// DefaultInClusterEndpointURL is upstream's in-cluster endpoint: its
// controller's Service in aks-flex-system, through the API server's
// service proxy.
const DefaultInClusterEndpointURL = "/api/v1/namespaces/aks-flex-system/services/http:aks-flex-controller:80/proxy"

// MachineClient is agent.machineClient: where the node's AKS Machine is
// read and its status written. In in-cluster mode the agent reads the
// same Machine JSON at <endpointUrl>/machines/<agent.nodeName> through
// the cluster connection (the node's own credential), creates it there
// with a PUT and PATCHes <...>/status, as upstream's agent does; nothing
// talks to ARM then, and azure.targetCluster (which upstream's configs
// carry in this mode too) only names the cluster.
type MachineClient struct {
	Mode        string `json:"mode,omitempty"`
	EndpointURL string `json:"endpointUrl,omitempty"`
}

// InCluster says the Machine is read through the cluster connection.
func (m *MachineClient) InCluster() bool { return m != nil && m.Mode == MachineClientInCluster }

// Endpoint is the in-cluster endpoint path (the default when unset).
func (m *MachineClient) Endpoint() string {
	if m == nil || m.EndpointURL == "" {
		return DefaultInClusterEndpointURL
	}
	return m.EndpointURL
}

// HasMachine says config c registers and follows an AKS Machine: in ARM
// with azure.targetCluster.resourceId, or through the cluster.
func (c *Config) HasMachine() bool { return c.Azure.ARM() || c.Agent.MachineClient.InCluster() }

// machineClient checks agent.machineClient.
func (v *validator) machineClient(c *Config) {
	m := c.Agent.MachineClient
	if m == nil {
		return
	}
	switch m.Mode {
	case "", MachineClientARM:
		if m.EndpointURL != "" {
			v.add("agent.machineClient.endpointUrl", "applies only to mode %q (upstream's ARM proxy for its own tests is not supported): remove it, or set azure.resourceManagerEndpoint for another ARM endpoint", MachineClientInCluster)
		}
		return
	case MachineClientInCluster:
	case machineClientE2E:
		v.add("agent.machineClient.mode", "%q reads the Machine from a local file for upstream's tests; aks-flex-node does not: use %q (the default) or %q", m.Mode, MachineClientARM, MachineClientInCluster)
		return
	default:
		v.add("agent.machineClient.mode", "%q is not a machine client mode: want %q (the default) or %q", m.Mode, MachineClientARM, MachineClientInCluster)
		return
	}
	if msg := inClusterPath(m.EndpointURL); msg != "" {
		v.add("agent.machineClient.endpointUrl", "%q %s", m.EndpointURL, msg)
	}
	if c.Agent.RequireMachineRegistration && (c.Azure.BootstrapToken == nil || c.Azure.BootstrapToken.Token == "") {
		v.add("agent.requireMachineRegistration", "in-cluster mode registers at start with azure.bootstrapToken's credential (the node has no other before it joins): set azure.bootstrapToken, or false (the agent registers once joined)")
	}
}

// inClusterPath says what is wrong with an in-cluster endpoint, "" if
// nothing (empty takes the default).
func inClusterPath(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "is not a URL path"
	case u.Scheme != "" || u.Host != "":
		return "must be a Kubernetes API path such as " + DefaultInClusterEndpointURL + ", without scheme or host: the agent sends it to the API server of node.kubelet.clusterFQDN with the node's credential"
	case !strings.HasPrefix(u.Path, "/") || u.Fragment != "" || u.RawQuery != "":
		return "must be an absolute path (starting with /) without query or fragment, such as " + DefaultInClusterEndpointURL
	case path.Clean(u.Path) != strings.TrimSuffix(u.Path, "/") || u.Path == "/":
		return "must be a clean path (no //, . or .. segments) below the API server's root"
	}
	return ""
}
