// Package config owns the public JSON configuration of aks-flex-node: its
// schema, strict decoding, defaults, validation, and the lookup that entry
// points started by systemd use to find the layout; and what becomes of
// upstream AKS Flex Node's keys (upstream.go) and their rewrite (Migrate).
package config

import "github.com/Azure/aks-flex-node/internal/layout"

// Config is the whole configuration file. JSON names are public API: users
// already have files with these section and key names.
type Config struct {
	Azure      Azure      `json:"azure"`
	Agent      Agent      `json:"agent"`
	Components Components `json:"components"`
	Bootstrap  Bootstrap  `json:"bootstrap"`
	Networking Networking `json:"networking"`
	Node       Node       `json:"node"`
	// HostRouting is upstream's section of the same name and shape.
	HostRouting HostRouting `json:"hostRouting"`

	// layout is what Validate made of agent.hostPrefix and agent.logDir.
	layout layout.Layout
	// notes are the deprecations Decode found: upstream's legacy names it
	// read as ours (see upstream.go).
	notes []string
}

// Notes are one line each about upstream keys and values the file uses
// that aks-flex-node reads under another name; empty for a file in this
// product's schema.
func (c *Config) Notes() []string { return c.notes }

// Azure holds the node's Azure identity and, with TargetCluster, where
// its AKS Machine lives in Azure Resource Manager (upstream's keys, at
// upstream's paths).
type Azure struct {
	// SubscriptionID is the subscription of the cluster; when set it must
	// be the one targetCluster.resourceId names.
	SubscriptionID string `json:"subscriptionId,omitempty"`
	TenantID       string `json:"tenantId,omitempty"`
	Cloud          string `json:"cloud,omitempty"`
	// ResourceManagerEndpoint is the ARM endpoint (https); empty takes
	// azure.cloud's.
	ResourceManagerEndpoint string `json:"resourceManagerEndpoint,omitempty"`
	// TargetCluster, with its resourceId, makes the node register and
	// follow an AKS Machine; absent, nothing talks to ARM.
	TargetCluster *TargetCluster `json:"targetCluster,omitempty"`
	// TargetAgentPoolName is the agent pool holding the node's Machine.
	TargetAgentPoolName string `json:"targetAgentPoolName,omitempty"`
	// MachineAPIVersion is the api-version of the AKS machine API calls;
	// empty takes DefaultMachineAPIVersion.
	MachineAPIVersion string `json:"machineApiVersion,omitempty"`
	// AuthorityHost is the Microsoft Entra authority a service principal
	// signs in at, for sovereign and private clouds; empty takes the
	// authority of Cloud.
	AuthorityHost    string            `json:"authorityHost,omitempty"`
	BootstrapToken   *BootstrapToken   `json:"bootstrapToken,omitempty"`
	ManagedIdentity  *ManagedIdentity  `json:"managedIdentity,omitempty"`
	ServicePrincipal *ServicePrincipal `json:"servicePrincipal,omitempty"`
	Arc              *Arc              `json:"arc,omitempty"`
}

// TargetCluster is the AKS cluster in ARM.
type TargetCluster struct {
	// ResourceID is the cluster's ARM ID:
	// /subscriptions/<guid>/resourceGroups/<rg>/providers/Microsoft.ContainerService/managedClusters/<name>.
	ResourceID string `json:"resourceId,omitempty"`
	// Location is the cluster's region (informational here, as upstream).
	Location string `json:"location,omitempty"`
}

type BootstrapToken struct {
	Token string `json:"token"`
}

type ManagedIdentity struct {
	ClientID string `json:"clientId,omitempty"`
}

// ServicePrincipal signs in with exactly one of a client secret and a
// client certificate file (PEM, or PKCS#12 ending in .pfx or .p12, with
// the private key and no password; mode 0600, owned by root).
type ServicePrincipal struct {
	// TenantID defaults to azure.tenantId.
	TenantID              string `json:"tenantId,omitempty"`
	ClientID              string `json:"clientId"`
	ClientSecret          string `json:"clientSecret,omitempty"`
	ClientCertificatePath string `json:"clientCertificatePath,omitempty"`
}

// Arc, when enabled, takes the identity of the Azure Arc agent already
// connected on the host (its local identity endpoint). Upstream's Arc
// registration keys (machineName, resourceGroup, location, tags) are
// refused by name in upstream.go: aks-flex-node registers no host with Arc.
type Arc struct {
	Enabled bool `json:"enabled"`
}

type Agent struct {
	LogLevel                 string `json:"logLevel"`
	LogDir                   string `json:"logDir"`
	NodeName                 string `json:"nodeName"`
	MachineReconcileInterval string `json:"machineReconcileInterval"`
	// MetricsAddress, when set, is a TCP host:port the agent serves
	// /healthz and /metrics on, besides its socket in the state dir. An
	// empty host means loopback: exposing them further is said out loud.
	MetricsAddress string `json:"metricsAddress,omitempty"`
	// HostPrefix is the declared install prefix. Empty selects the classic
	// /usr/local layout; it is never inferred from the host.
	HostPrefix string `json:"hostPrefix"`
	// RequireMachineRegistration makes a failed AKS Machine registration
	// refuse start (nothing on the host changed); false joins with a
	// warning, as upstream does.
	RequireMachineRegistration bool `json:"requireMachineRegistration"`
	// MachineClient chooses where the node's AKS Machine is read from:
	// ARM (default) or, as upstream's in-cluster mode, a Kubernetes API
	// path through the cluster connection (see machine_client.go).
	MachineClient *MachineClient `json:"machineClient,omitempty"`
}

type Components struct {
	Kubernetes   string `json:"kubernetes"`
	Containerd   string `json:"containerd"`
	Runc         string `json:"runc"`
	SandboxImage string `json:"sandboxImage"`
}

type Bootstrap struct {
	OCIImage string `json:"ociImage,omitempty"`
	// OCIImagePlainHTTP lets the registry of a registry ociImage that is
	// not on loopback be reached over plain HTTP, that registry only. A
	// sibling of ociImage because ociImage is a string in the public
	// schema; named like offlineArtifacts.plainHTTP.
	OCIImagePlainHTTP     bool             `json:"ociImagePlainHTTP,omitempty"`
	OfflineArtifacts      OfflineArtifacts `json:"offlineArtifacts"`
	AdditionalHostDevices []string         `json:"additionalHostDevices,omitempty"`
}

type OfflineArtifacts struct {
	Source string `json:"source,omitempty"`
	// PlainHTTP lets an oci:// source on a registry that is not on
	// loopback be reached over plain HTTP. Loopback registries may always
	// use it; anything else needs this to be said out loud.
	PlainHTTP bool `json:"plainHTTP,omitempty"`
}

type Networking struct {
	// Mode is who gives the node its pod network: NetworkModeBridge (the
	// agent's bridge + host-local config, routes between flex nodes) or
	// NetworkModeCluster (the cluster's CNI DaemonSet writes its own
	// config into the machine; the agent writes none).
	Mode         string `json:"mode"`
	DNSServiceIP string `json:"dnsServiceIP"`
	CNIVersion   string `json:"cniVersion"`
	// PodCIDR is this node's pod range for the bridge CNI config. Empty
	// takes the Node's spec.podCIDR, which the controller manager
	// allocates (--allocate-node-cidrs) once the node has registered.
	PodCIDR string `json:"podCIDR,omitempty"`
	// ClusterPodCIDR is the cluster's pod range (the controller manager's
	// --cluster-cidr), in bridge mode. The agent routes to, and spares
	// from the masquerade, only the other Nodes' pod CIDRs inside it, of
	// this node's pod CIDR's size: a Node object is cluster data, and
	// anyone who may write one must not choose the host's routes. Empty:
	// no routes to other nodes' pods.
	ClusterPodCIDR string `json:"clusterPodCIDR,omitempty"`
	// ServiceCIDR is the cluster's Service range, for the overlap checks
	// (host routes, host addresses); empty checks networking.dnsServiceIP
	// alone.
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
	// KubeProxy says who gives the node's pods and host the cluster's
	// Services: KubeProxyDaemonSet (the default: the cluster's kube-proxy
	// DaemonSet, or its CNI, as on AKS; the agent runs none) or
	// KubeProxyAgent (the agent runs kube-proxy from the bundle inside the
	// machine, for clusters whose DaemonSet does not reach flex nodes).
	KubeProxy string `json:"kubeProxy,omitempty"`
	// KubeProxyMode is the mode of the agent's kube-proxy: "iptables",
	// "nftables", or empty: iptables unless the host prefers nftables (it
	// has nft and no iptables).
	KubeProxyMode string `json:"kubeProxyMode,omitempty"`
}

// The networking.kubeProxy values and the kube-proxy modes.
const (
	KubeProxyDaemonSet = "daemonset"
	KubeProxyAgent     = "agent"
	KubeProxyIPTables  = "iptables"
	KubeProxyNFTables  = "nftables"
)

// AgentKubeProxy says the agent runs the node's kube-proxy.
func (n *Networking) AgentKubeProxy() bool { return n.KubeProxy == KubeProxyAgent }

// HostRouting is IPv4 static routes the agent owns on the host, and the
// CIDRs that must keep routing through the default route's interface.
type HostRouting struct {
	StaticRoutes StaticRoutes `json:"staticRoutes"`
	RouteOverlap RouteOverlap `json:"routeOverlap"`
}

type StaticRoutes struct {
	Enabled bool          `json:"enabled"`
	Routes  []StaticRoute `json:"routes,omitempty"`
}

// StaticRoute is one route: a destination through a gateway, a device,
// or both; metric 0 is the kernel's default priority.
type StaticRoute struct {
	Destination string `json:"destination"`
	Gateway     string `json:"gateway,omitempty"`
	Dev         string `json:"dev,omitempty"`
	Metric      int64  `json:"metric,omitempty"`
}

// RouteOverlap names CIDRs (the cluster's networks, say) that must route
// through the default route's interface: a more specific route elsewhere
// would steal their traffic. Mode WARN (the default) logs the overlap;
// STRICT refuses start at preflight.
type RouteOverlap struct {
	ExpectedCIDRs []string `json:"expectedCidrs,omitempty"`
	Mode          string   `json:"mode,omitempty"`
}

// The routeOverlap modes.
const (
	RouteOverlapWarn   = "WARN"
	RouteOverlapStrict = "STRICT"
)

type Node struct {
	MaxPods int               `json:"maxPods"`
	Labels  map[string]string `json:"labels,omitempty"`
	Taints  []string          `json:"taints,omitempty"`
	Kubelet Kubelet           `json:"kubelet"`
}

type Kubelet struct {
	ClusterFQDN          string `json:"clusterFQDN,omitempty"`
	CACertData           string `json:"caCertData,omitempty"`
	NodeIP               string `json:"nodeIP,omitempty"`
	Verbosity            *int   `json:"verbosity,omitempty"`
	ImageGCHighThreshold int    `json:"imageGCHighThreshold"`
	ImageGCLowThreshold  int    `json:"imageGCLowThreshold"`
}
