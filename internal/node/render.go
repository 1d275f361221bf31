// Package node owns everything that goes inside a machine to make it a
// Kubernetes worker: the containerd configuration and unit, the kubelet
// configuration, unit and bootstrap kubeconfig, the cluster CA, the
// fallback bridge CNI network, and on cgroup v1 hosts the unit that makes
// the cgroup hierarchies writable. Files are rendered from the config by
// pure functions (Render; the text of the units and the script is in
// internal/genfile, the configs are marshalled from their Go types) and
// written into the machine's rootfs (Write); images are imported through
// the machine's exec (ImportImages).
//
// Every path here is a path inside the machine. systemctl cannot run in a
// stopped machine's rootfs, so units are enabled by creating the
// multi-user.target.wants links directly, as systemctl enable would.
package node

import (
	"fmt"
	"io/fs"
	"net"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/node/nodedirs"
)

// Paths inside the machine. The binaries are installed by the artifact
// package into the directories of nodedirs, from which these derive.
const (
	ContainerdBinary  = nodedirs.Bin + "/containerd"
	KubeletBinary     = nodedirs.Bin + "/kubelet"
	CtrBinary         = nodedirs.Bin + "/ctr"
	RuncBinary        = nodedirs.Sbin + "/runc"
	CNIConfDir        = "/etc/cni/net.d"
	ContainerdSocket  = "/run/containerd/containerd.sock"
	ContainerdConfig  = "/etc/containerd/config.toml"
	KubeletConfigFile = "/var/lib/kubelet/config.yaml"
	BootstrapKubeconf = "/etc/kubernetes/bootstrap-kubelet.conf"
	KubeletKubeconf   = "/etc/kubernetes/kubelet.conf"
	ClusterCAFile     = "/etc/kubernetes/pki/ca.crt"
	// The bridge network is a fallback: containerd loads only the first
	// conflist in name order, so the 99- prefix lets a CNI the cluster
	// installs later (10-calico, 10-azure, 05-cilium, ...) take over
	// without removing this file.
	CNIConfFile    = CNIConfDir + "/99-aks-flex-node.conflist"
	CgroupRWScript = "/usr/local/lib/aks-flex-node/cgroup-rw.sh"

	// HostAgentLibDir is where start binds the host's agent lib dir
	// (read-only) when the node joins with an Azure identity: the
	// kubelet's credential plugin is the agent binary of the host's
	// current upgrade slot, so an agent upgrade upgrades the plugin.
	HostAgentLibDir = "/opt/aks-flex-node-host/lib"
	// HostIdentityDir is where start binds the host's identity dir: the
	// identity the plugin signs in with and the token cache it shares
	// with the host.
	HostIdentityDir = "/opt/aks-flex-node-host/identity"
	// CredentialPlugin is the plugin the kubelet's kubeconfig runs.
	CredentialPlugin = HostAgentLibDir + "/" + layout.CurrentLinkName

	unitDir  = "/etc/systemd/system"
	wantsDir = unitDir + "/multi-user.target.wants"

	ContainerdUnitName = "containerd.service"
	KubeletUnitName    = "kubelet.service"
	CgroupRWUnitName   = "aks-flex-node-cgroup-rw.service"
)

// Unit file paths inside the machine.
const (
	ContainerdUnitFile = unitDir + "/" + ContainerdUnitName
	KubeletUnitFile    = unitDir + "/" + KubeletUnitName
	CgroupRWUnitFile   = unitDir + "/" + CgroupRWUnitName
)

// File is one rendered file or link, at a path inside the machine.
type File struct {
	Path string
	Mode fs.FileMode // permission bits; ignored for links
	Data []byte
	// Link, when set, makes this a symlink to Link instead of a file.
	Link string
	// Secret files hold credentials: mode 0600, never logged.
	Secret bool
}

// Render returns every file that makes the machine a node for c, in the
// order Write writes them: payloads before the units that use them, units
// before the links that enable them. It reads nothing from disk.
// Errors never contain the bootstrap token.
func Render(c *config.Config, opts Options) ([]File, error) {
	if opts.PodCIDR == "" {
		opts.PodCIDR = c.Networking.PodCIDR
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("node options: %w", err)
	}
	in, err := newInputs(c, o)
	if err != nil {
		return nil, err
	}

	type step struct {
		path   string
		mode   fs.FileMode
		secret bool
		render func(*inputs) ([]byte, error)
	}
	steps := []step{
		{ClusterCAFile, 0o644, false, func(in *inputs) ([]byte, error) { return in.caPEM, nil }},
	}
	// Either way the kubelet TLS-bootstraps: the bootstrap credential (a
	// token, or the identity through the plugin) only asks for the
	// node's client certificate, and the kubelet and the agent then act
	// as system:node:<name>, which the Node authorizer and
	// NodeRestriction bound (DESIGN decision 10).
	steps = append(steps, step{BootstrapKubeconf, 0o600, !in.identity, renderBootstrapKubeconfig})
	steps = append(steps, []step{
		{KubeletConfigFile, 0o644, false, renderKubeletConfig},
		{ContainerdConfig, 0o644, false, renderContainerdConfig},
	}...)
	if o.PodCIDR != "" {
		steps = append(steps, step{CNIConfFile, 0o644, false, renderCNIConfig})
	}
	if o.CgroupV1 {
		steps = append(steps,
			step{CgroupRWScript, 0o755, false, renderCgroupRWScript},
			step{CgroupRWUnitFile, 0o644, false, renderCgroupRWUnit},
		)
	}
	steps = append(steps,
		step{ContainerdUnitFile, 0o644, false, renderContainerdUnit},
		step{KubeletUnitFile, 0o644, false, renderKubeletUnit},
	)
	if in.kubeProxy {
		steps = append(steps,
			step{KubeProxyConfigFile, 0o644, false, renderKubeProxyConfig},
			step{KubeProxyUnitFile, 0o644, false, renderKubeProxyUnit},
		)
	}
	var files []File
	for _, s := range steps {
		data, err := s.render(in)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", s.path, err)
		}
		files = append(files, File{Path: s.path, Mode: s.mode, Data: data, Secret: s.secret})
	}
	for _, u := range enabledUnits(o, in.kubeProxy) {
		files = append(files, File{Path: wantsDir + "/" + u, Link: unitDir + "/" + u})
	}
	return files, nil
}

func enabledUnits(o Options, kubeProxy bool) []string {
	units := []string{ContainerdUnitName, KubeletUnitName}
	if o.CgroupV1 {
		units = append(units, CgroupRWUnitName)
	}
	if kubeProxy {
		units = append(units, KubeProxyUnitName)
	}
	return units
}

// staleFiles are the files Render produces only in some modes; Write
// removes those the current mode does not produce, so a host that changed
// cgroup mode converges instead of keeping a unit that remounts nothing,
// one moved to networking.mode cluster keeps no bridge config, and
// one whose kube-proxy is the cluster's DaemonSet's keeps no unit of the
// agent's.
func staleFiles(o Options, clusterCNI, kubeProxy bool) []string {
	var stale []string
	if clusterCNI {
		// A node moved from bridge to cluster mode: containerd loads the
		// first config by name, and the cluster's may sort after ours.
		stale = append(stale, CNIConfFile)
	}
	if !kubeProxy {
		stale = append(stale, kubeProxyFiles...)
	}
	if !o.CgroupV1 {
		stale = append(stale, wantsDir+"/"+CgroupRWUnitName, CgroupRWUnitFile, CgroupRWScript)
	}
	return stale
}

// inputs is the config and options reduced to what the renderers use,
// checked once. Values interpolated into unit files are restricted to
// bytes systemd gives no meaning to (no whitespace, quotes, '%', '$', '\').
type inputs struct {
	o         Options
	server    string
	caPEM     []byte
	token     string
	identity  bool // the kubelet bootstraps with an Azure identity
	serverID  string
	nodeName  string
	nodeIP    string
	labels    []string // key=value, sorted
	taints    []string
	dnsIP     string
	sandbox   string
	maxPods   int32
	gcHigh    int32
	gcLow     int32
	verbosity *int
	podIPv6   bool
	// kubeProxy: the agent runs kube-proxy in proxyMode.
	kubeProxy bool
	proxyMode string
}

var unitArgRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._/:=@,-]+$`) })

func newInputs(c *config.Config, o Options) (*inputs, error) {
	k := &c.Node.Kubelet
	in := &inputs{
		o:         o,
		server:    k.ClusterFQDN,
		caPEM:     c.CAPEM(),
		nodeName:  c.Agent.NodeName,
		nodeIP:    k.NodeIP,
		taints:    c.Node.Taints,
		dnsIP:     c.Networking.DNSServiceIP,
		sandbox:   c.Components.SandboxImage,
		maxPods:   int32(c.Node.MaxPods),
		gcHigh:    int32(k.ImageGCHighThreshold),
		gcLow:     int32(k.ImageGCLowThreshold),
		verbosity: k.Verbosity,
		kubeProxy: c.Networking.AgentKubeProxy(),
		proxyMode: kubeProxyMode(c, o),
	}
	if o.NodeIP != "" {
		in.nodeIP = o.NodeIP
	}
	if c.Azure.BootstrapToken != nil {
		in.token = c.Azure.BootstrapToken.Token
	}
	in.identity = c.Azure.Identity()
	in.serverID = AKSServerID
	switch {
	case in.server == "":
		return nil, fmt.Errorf("node.kubelet.clusterFQDN: is empty; the kubelet needs the API server")
	case len(in.caPEM) == 0:
		return nil, fmt.Errorf("node.kubelet.caCertData: is empty; the kubelet needs the cluster CA")
	case in.token == "" && !in.identity:
		return nil, fmt.Errorf("azure: no authentication method; the kubelet needs a bootstrap token or an Azure identity")
	case in.token != "" && in.identity:
		return nil, fmt.Errorf("azure: a bootstrap token and an Azure identity; the kubelet takes one")
	case in.sandbox == "":
		return nil, fmt.Errorf("components.sandboxImage: is empty")
	case net.ParseIP(in.dnsIP) == nil:
		return nil, fmt.Errorf("networking.dnsServiceIP: %q is not an IP address", in.dnsIP)
	case in.maxPods < 1:
		return nil, fmt.Errorf("node.maxPods: %d must be positive", c.Node.MaxPods)
	}
	if in.nodeIP != "" && net.ParseIP(in.nodeIP) == nil {
		return nil, fmt.Errorf("node.kubelet.nodeIP: %q is not an IP address", in.nodeIP)
	}
	if !unitArgRE().MatchString(in.nodeName) {
		return nil, fmt.Errorf("agent.nodeName: %q cannot be passed to the kubelet unit", in.nodeName)
	}
	keys := make([]string, 0, len(c.Node.Labels))
	for key := range c.Node.Labels {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		l := key + "=" + c.Node.Labels[key]
		if strings.Contains(l, ",") || !unitArgRE().MatchString(l) {
			return nil, fmt.Errorf("node.labels.%s: %q cannot be passed to the kubelet unit", key, l)
		}
		in.labels = append(in.labels, l)
	}

	// The default route's family follows the pod range's.
	if o.PodCIDR != "" {
		_, ipnet, _ := net.ParseCIDR(o.PodCIDR) // checked by withDefaults
		in.podIPv6 = ipnet.IP.To4() == nil
	}
	return in, nil
}
