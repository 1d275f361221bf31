package config

import (
	"fmt"
	"sort"
	"strings"
)

// Users of upstream AKS Flex Node bring its config.json as it is. Every key
// of upstream's three schema generations has one outcome here, and this
// table is the single source for the refusal messages, the legacy aliases,
// `config migrate`, the table in docs/reference/config.md (rendered by
// internal/refdocs) and the test that each entry behaves as listed.

// Outcome is what aks-flex-node does with an upstream key.
type Outcome string

const (
	// Implemented: a key of this schema with upstream's meaning, or with a
	// difference the entry's Here states.
	Implemented Outcome = "implemented"
	// Mapped: upstream's legacy name (or value), read as To (ToValue) with
	// a one-line deprecation note.
	Mapped Outcome = "mapped"
	// Refused: exit 2 with a message saying what the key did upstream.
	Refused Outcome = "refused"
	// Ours: a key upstream does not have.
	Ours Outcome = "aks-flex-node only"
)

// DropAlways, as an entry's DropWhen, makes `config migrate` remove the
// key whatever its value.
const DropAlways = "*"

// migrateHint is replaced by the file's name where it is known.
const migrateHint = "aks-flex-node config migrate --from FILE"

// UpstreamKey is one row of the table.
type UpstreamKey struct {
	// Key is the JSON path as upstream spells it.
	Key string
	// Value, for a value alias, is upstream's value that maps.
	Value   string
	Outcome Outcome
	// To and ToValue are where a Mapped key (or value) goes.
	To      string
	ToValue string
	// Did says what the key does upstream; Not says what aks-flex-node
	// does instead. Together they are a refusal's message.
	Did string
	Not string
	// DropWhen is the compact JSON value for which `config migrate`
	// removes a refused key, because it states what aks-flex-node does
	// anyway (or DropAlways); "" keeps the key as a refusal.
	DropWhen string
	// Here is the reference page's note on the outcome: a difference, a reason.
	Here string
	// Sample is a compact JSON value upstream accepts, for the table test;
	// SampleTo is what a mapped sample reads as, when not the same.
	Sample   string
	SampleTo string
}

// Message is the refusal's text (without the key, which the error's path
// carries).
func (k UpstreamKey) Message() string {
	msg := k.Did
	if !strings.Contains(msg, "upstream AKS Flex Node") {
		msg += " in upstream AKS Flex Node"
	}
	msg += "; " + k.Not
	switch k.DropWhen {
	case "":
	case DropAlways:
		msg += "; run `" + migrateHint + "` to remove it"
	default:
		msg += fmt.Sprintf("; remove it (`%s` does when it is %s, which is what aks-flex-node does)", migrateHint, k.DropWhen)
	}
	return msg
}

// note is the deprecation note of a Mapped entry.
func (k UpstreamKey) note() string {
	if k.Value != "" {
		return fmt.Sprintf("%s %q is upstream's name of the cloud; read as %q (`%s` rewrites it)", k.Key, k.Value, k.ToValue, migrateHint)
	}
	return fmt.Sprintf("%s is upstream's legacy key; read as %s (`%s` renames it)", k.Key, k.To, migrateHint)
}

const (
	noMachine  = "aks-flex-node reads the AKS Machine from ARM only (azure.targetCluster.resourceId)"
	oldSchema  = " in upstream AKS Flex Node's pre-RP schema (ignored there since)"
	noKubelet  = "aks-flex-node does not set it; the kubelet's own default applies"
	fixedPaths = "aks-flex-node fixes these paths (agent.hostPrefix chooses the install prefix)"
)

// UpstreamKeys is the table, in the reference page's order.
var UpstreamKeys = []UpstreamKey{
	// azure
	{Key: "azure.subscriptionId", Outcome: Implemented, Here: "the cluster's subscription: when set, it must be the one azure.targetCluster.resourceId names", Sample: `"00000000-0000-0000-0000-000000000001"`},
	{Key: "azure.tenantId", Outcome: Implemented, Here: "also the service principal's tenant when azure.servicePrincipal.tenantId is empty (upstream requires that one)", Sample: `"00000000-0000-0000-0000-000000000002"`},
	{Key: "azure.cloud", Outcome: Implemented, Here: "AzurePublicCloud (default), AzureChinaCloud, AzureUSGovernmentCloud: chooses the Entra authority and, unless azure.resourceManagerEndpoint is set, the ARM endpoint and token audience", Sample: `"AzureChinaCloud"`},
	{Key: "azure.cloud", Value: "AzureUSGovernment", Outcome: Mapped, To: "azure.cloud", ToValue: "AzureUSGovernmentCloud", Sample: `"AzureUSGovernment"`, SampleTo: "AzureUSGovernmentCloud"},
	{Key: "azure.cloud", Value: "AzureGovernmentCloud", Outcome: Mapped, To: "azure.cloud", ToValue: "AzureUSGovernmentCloud", Sample: `"AzureGovernmentCloud"`, SampleTo: "AzureUSGovernmentCloud"},
	{Key: "azure.resourceManagerEndpoint", Outcome: Implemented, Here: "the machine client's ARM endpoint: https://host[:port], no path; empty takes azure.cloud's. The token audience follows upstream's rule (the public, US Government and China endpoints have their management.core audiences; any other endpoint is its own audience)", Sample: `"https://management.azure.com"`},
	{Key: "azure.targetAgentPoolName", Outcome: Implemented, Here: "the agent pool holding the node's AKS Machine (default aksflexnodes, upstream's pool, when azure.targetCluster.resourceId is set)", Sample: `"aksflexnodes"`},
	{Key: "azure.targetCluster.resourceId", Outcome: Implemented, Here: "the cluster's ARM ID; set, start registers the node as the AKS Machine <resourceId>/agentPools/<targetAgentPoolName>/machines/<agent.nodeName> with the Azure identity (next to a bootstrap token for the kubelet if one is set); absent, nothing talks to ARM", Sample: `"/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/rg/providers/Microsoft.ContainerService/managedClusters/c1"`},
	{Key: "azure.targetCluster.location", Outcome: Implemented, Here: "the cluster's region; checked for form, informational", Sample: `"eastus"`},
	{Key: "azure.machineApiVersion", Outcome: Ours, Here: "the api-version of the AKS machine API calls (default " + DefaultMachineAPIVersion + ", the preview version upstream's machine client speaks); YYYY-MM-DD[-preview]", Sample: `"2025-10-02-preview"`},
	{Key: "azure.authorityHost", Outcome: Ours, Here: "the Entra authority for sovereign and private clouds", Sample: `"https://login.microsoftonline.us/"`},
	{Key: "azure.bootstrapToken.token", Outcome: Implemented, Here: "next to one Azure identity only with azure.targetCluster.resourceId, as upstream: the token joins the kubelet, the identity registers the AKS Machine", Sample: `"abcdef.0123456789abcdef"`},
	{Key: "azure.managedIdentity.clientId", Outcome: Implemented, Sample: `"00000000-0000-0000-0000-000000000003"`},
	{Key: "azure.servicePrincipal.tenantId", Outcome: Implemented, Here: "defaults to azure.tenantId", Sample: `"00000000-0000-0000-0000-000000000002"`},
	{Key: "azure.servicePrincipal.clientId", Outcome: Implemented, Sample: `"00000000-0000-0000-0000-000000000004"`},
	{Key: "azure.servicePrincipal.clientSecret", Outcome: Implemented, Sample: `"s3cret"`},
	{Key: "azure.servicePrincipal.clientSecretFile", Outcome: Refused, Did: "reads the service principal's secret, or a PEM or .pfx certificate, from a file", Not: "aks-flex-node reads a secret from clientSecret and a certificate from clientCertificatePath", Sample: `"/etc/aks-flex-node/sp.pem"`},
	{Key: "azure.servicePrincipal.clientCertificatePath", Outcome: Ours, Here: "PEM or PKCS#12 certificate and key, mode 0600", Sample: `"/etc/aks-flex-node/sp.pem"`},
	{Key: "azure.arc.enabled", Outcome: Implemented, Here: "upstream's newest meaning: use the Arc agent already connected on the host", Sample: `true`},
	{Key: "azure.arc.machineName", Outcome: Refused, Did: arcDid, Not: arcNot, Sample: `"node-1"`},
	{Key: "azure.arc.resourceGroup", Outcome: Refused, Did: arcDid, Not: arcNot, Sample: `"rg"`},
	{Key: "azure.arc.location", Outcome: Refused, Did: arcDid, Not: arcNot, Sample: `"eastus"`},
	{Key: "azure.arc.tags", Outcome: Refused, Did: arcDid, Not: arcNot, Sample: `{"team":"a"}`},
	// agent
	{Key: "agent.logLevel", Outcome: Implemented, Sample: `"debug"`},
	{Key: "agent.logDir", Outcome: Implemented, Here: "the agent writes agent.log there (rotated), besides the journal", Sample: `"/var/log/aks-flex-node"`},
	{Key: "agent.nodeName", Outcome: Implemented, Sample: `"node-1"`},
	{Key: "agent.machineReconcileInterval", Outcome: Implemented, Here: "how often the agent reconciles the node (default 1m): the machine running, the node files and units in it as start recorded them (restored when edited or deleted), the inactive side stopped, a deleted Node registered again, and with azure.targetCluster.resourceId the AKS Machine's goal followed (0-10 % jitter); upstream reconciles against the AKS machine resource (default 10m) and also takes nanoseconds as a number, which `config migrate` turns into a duration", Sample: `"5m"`},
	{Key: "agent.metricsAddress", Outcome: Ours, Here: "a TCP address for the agent's /healthz and /metrics, besides its socket in the state dir", Sample: `"127.0.0.1:9464"`},
	{Key: "agent.hostPrefix", Outcome: Ours, Here: "the install prefix; `config migrate --host-prefix` sets it", Sample: `"/opt/aks-flex-node"`},
	{Key: "agent.machineClient.mode", Outcome: Implemented, Here: "arm (default): the Machine in Azure Resource Manager (azure.targetCluster.resourceId); in-cluster: the same Machine JSON through the cluster connection at agent.machineClient.endpointUrl, with the bootstrap token's credential at start and the node's own in the agent (no Azure identity needed; nothing talks to ARM, azure.targetCluster only names the cluster); upstream's e2e (a local file) is refused", Sample: `"in-cluster"`},
	{Key: "agent.machineClient.endpointUrl", Outcome: Implemented, Here: "in-cluster mode only: a Kubernetes API path (no scheme or host) such as the default " + DefaultInClusterEndpointURL + "; the agent GETs and PUTs <path>/machines/<agent.nodeName> and PATCHes <path>/machines/<agent.nodeName>/status there. Upstream's ARM proxy (an https URL in arm mode, for its tests) is refused", Sample: `"/api/v1/namespaces/aks-flex-system/services/http:aks-flex-controller:80/proxy"`},
	{Key: "agent.requireMachineRegistration", Outcome: Implemented, Here: "true: a failed AKS Machine registration refuses start before anything on the host changes; false (default, as upstream): the node joins, start warns and the agent retries each interval. Needs azure.targetCluster.resourceId", Sample: `false`},
	{Key: "agent.machineOperationMode", Outcome: Refused, Did: "handles Machina MachineOperation resources (reboot, repave) when auto", Not: "aks-flex-node does not", DropWhen: `"disable"`, Sample: `"auto"`},
	{Key: "agent.e2eMode", Outcome: Refused, Did: "reads the AKS machine resource from a local file (for tests)" + oldSchema, Not: noMachine, DropWhen: `false`, Sample: `true`},
	{Key: "agent.enableDriftDetectionAndRemediation", Outcome: Refused, Did: "detects Kubernetes version drift and repaves the node" + oldSchema, Not: "aks-flex-node upgrades only when told (agent-upgrade)", DropWhen: `false`, Sample: `true`},
	{Key: "agent.kubeconfigData", Outcome: Refused, Did: "gives the host agent an embedded kubeconfig", Not: "aks-flex-node's agent uses the node's own credentials", Sample: `"YXBpVmVyc2lvbjogdjE="`},
	// components
	{Key: "components.kubernetes", Outcome: Implemented, Here: "default 1.35.0; upstream has none (its generator writes the cluster's version)", Sample: `"v1.35.0"`},
	{Key: "components.containerd", Outcome: Implemented, Here: "default " + DefaultContainerdVersion + "; upstream's agent pins 2.1.8 (2.0.4 earlier): the containerd config aks-flex-node writes is in the version-2 format, which containerd 1.7 reads as it is (2.x converts it at every start)", Sample: `"1.7.28"`},
	{Key: "components.runc", Outcome: Implemented, Here: "default " + DefaultRuncVersion + ", the runc release containerd 1.7.28 sets up for its own tests (script/setup/runc-version); upstream's config defaults to 1.1.12 and its agent to 1.5.0", Sample: `"1.3.0"`},
	{Key: "components.sandboxImage", Outcome: Implemented, Here: "default pause:3.10; upstream's agent uses pause:3.9. The pause image only holds a pod's namespaces, so any recent tag serves; an offline bundle brings its own", Sample: `"mcr.microsoft.com/oss/kubernetes/pause:3.10"`},
	{Key: "components.gantry.disabled", Outcome: Refused, Did: "turns off the shared agent's Gantry registry routing", Not: "aks-flex-node has no Gantry", DropWhen: `true`, Sample: `false`},
	// bootstrap
	{Key: "bootstrap.ociImage", Outcome: Implemented, Sample: `"oci-layout:///var/lib/images:worker"`},
	{Key: "bootstrap.ociImagePlainHTTP", Outcome: Ours, Sample: `true`},
	{Key: "bootstrap.offlineArtifacts.source", Outcome: Implemented, Here: "a difference: the template's .KubernetesVersion has no leading v here (upstream: v1.35.0, and .KubernetesVersionNoV); no https:// archives; a bundle in upstream's layout (agent-artifacts-builder's) is read from a directory, not from upstream's oci:// artifact (artifacts build --layout native converts one)", Sample: `"/opt/bundles/x"`},
	{Key: "bootstrap.offlineArtifacts.plainHTTP", Outcome: Ours, Sample: `true`},
	{Key: "bootstrap.additionalHostDevices", Outcome: Implemented, Sample: `["/dev/kvm"]`},
	{Key: "bootstrap.additionalHostMounts", Outcome: Refused, Did: "bind-mounts host paths into the node's machine", Not: "aks-flex-node binds only what it needs", Sample: `[{"source":"/data"}]`},
	{Key: "bootstrap.additionalRequiredServices", Outcome: Refused, Did: "makes the node's machine require and follow extra host units", Not: "aks-flex-node's machine unit orders only on its own units", Sample: `["docker.service"]`},
	// networking
	{Key: "networking.dnsServiceIP", Outcome: Implemented, Sample: `"10.0.0.10"`},
	{Key: "networking.cniVersion", Outcome: Implemented, Here: "default " + DefaultCNIVersion + "; upstream's agent uses 1.5.1. Both speak the CNI spec 1.0.0 of the bridge config aks-flex-node writes; 1.6.2 is the newer release", Sample: `"v1.6.2"`},
	{Key: "networking.mode", Outcome: Ours, Here: "who gives the node its pod network: bridge (default; the agent's bridge config, routes between flex nodes) or cluster (the cluster's CNI DaemonSet writes its config into the machine; the node is Ready once it has)", Sample: `"cluster"`},
	{Key: "networking.podCIDR", Outcome: Ours, Here: "this node's pod range for the bridge CNI config; empty takes the Node's spec.podCIDR (the controller manager's --allocate-node-cidrs)", Sample: `"10.244.3.0/24"`},
	{Key: "networking.clusterPodCIDR", Outcome: Ours, Here: "the cluster's pod range (the controller manager's --cluster-cidr), bridge mode: the agent routes to and spares from the masquerade only the other Nodes' pod CIDRs inside it, of this node's pod CIDR's size; empty: no routes to other nodes' pods", Sample: `"10.244.0.0/16"`},
	{Key: "networking.serviceCIDR", Outcome: Ours, Here: "the cluster's Service range, for the overlap checks (empty: networking.dnsServiceIP alone)", Sample: `"10.0.0.0/16"`},
	{Key: "networking.kubeProxy", Outcome: Ours, Here: "who runs kube-proxy for the node: daemonset (default: the cluster's DaemonSet, or none; the agent runs none) or agent (the agent runs kube-proxy from the bundle inside the machine, with the node's credentials)", Sample: `"agent"`},
	{Key: "networking.kubeProxyMode", Outcome: Ours, Here: "the agent's kube-proxy mode: iptables or nftables (empty: iptables unless the host has nft and no iptables)", Sample: `"nftables"`},
	{Key: "networking.localDNS", Outcome: Refused, Did: "runs AKS LocalDNS (a node-local CoreDNS) on the node", Not: "aks-flex-node does not", Sample: `{"mode":"Preferred"}`},
	// node
	{Key: "node.maxPods", Outcome: Implemented, Here: "1-250 (upstream does not check the range)", Sample: `110`},
	{Key: "node.labels", Outcome: Implemented, Here: "a difference: upstream always adds kubernetes.azure.com/managed=false, so that AKS's cloud controller does not delete a node that is not an Azure VM; aks-flex-node adds no label: set it in node.labels (the examples do) on an AKS cluster", Sample: `{"kubernetes.azure.com/managed":"false"}`},
	{Key: "node.taints", Outcome: Implemented, Sample: `["dedicated=flex:NoSchedule"]`},
	{Key: "node.kubelet.verbosity", Outcome: Implemented, Here: "0 is kept (upstream turns 0 into 2)", Sample: `2`},
	{Key: "node.kubelet.imageGCHighThreshold", Outcome: Implemented, Sample: `85`},
	{Key: "node.kubelet.imageGCLowThreshold", Outcome: Implemented, Sample: `80`},
	{Key: "node.kubelet.clusterFQDN", Outcome: Implemented, Here: "required with every method (upstream learns it from ARM with an identity)", Sample: `"api.example.test"`},
	{Key: "node.kubelet.caCertData", Outcome: Implemented, Here: "required with every method", Sample: `"` + sampleCA + `"`},
	{Key: "node.kubelet.nodeIP", Outcome: Implemented, Sample: `"10.1.0.4"`},
	{Key: "node.kubelet.dnsServiceIP", Outcome: Mapped, To: "networking.dnsServiceIP", Sample: `"10.0.0.10"`},
	{Key: "node.kubelet.serverURL", Outcome: Mapped, To: "node.kubelet.clusterFQDN", Here: "the URL's host[:port], as upstream reads it", Sample: `"https://api.example.test:443"`, SampleTo: "api.example.test:443"},
	{Key: "node.kubelet.kubeconfigData", Outcome: Refused, Did: "installs a kubeconfig verbatim for the kubelet", Not: "aks-flex-node's kubelet joins with a bootstrap token or an Azure identity", Sample: `"YXBpVmVyc2lvbjogdjE="`},
	{Key: "node.kubelet.systemReserved", Outcome: Refused, Did: "sets the kubelet's systemReserved", Not: noKubelet, Sample: `{"cpu":"100m"}`},
	{Key: "node.kubelet.kubeReserved", Outcome: Refused, Did: "sets the kubelet's kubeReserved (AKS's formula by default)", Not: noKubelet, Sample: `{"cpu":"100m"}`},
	{Key: "node.kubelet.evictionHard", Outcome: Refused, Did: "sets the kubelet's evictionHard" + oldSchema, Not: noKubelet, Sample: `{"memory.available":"100Mi"}`},
	{Key: "node.kubelet.imageCredentialProvider", Outcome: Refused, Did: "configures a kubelet image credential provider", Not: "aks-flex-node does not", Sample: `{"configPath":"/etc/x.yaml","binDir":"/opt/bin"}`},
	// npd, hostRouting
	{Key: "npd.version", Outcome: Refused, Did: "installs node-problem-detector at this version", Not: "aks-flex-node does not run node-problem-detector", DropWhen: DropAlways, Sample: `"v1.35.1"`},
	{Key: "hostRouting.staticRoutes.enabled", Outcome: Implemented, Here: "start installs the routes on the host, marked with aks-flex-node's routing protocol number (" + routeProtoNote + "); the agent puts them back after a reboot; reset removes them and no other route", Sample: `true`},
	{Key: "hostRouting.staticRoutes.routes", Outcome: Implemented, Here: "IPv4 destination, gateway, dev, metric, as upstream; `config validate` refuses a destination that is not a network CIDR, an implicit default route (only 0.0.0.0/0 is one) and a route into the pod or service CIDR; preflight (host-routes) refuses a gateway on no local subnet", Sample: `[{"destination":"10.2.0.0/16","dev":"eth1","gateway":"192.168.10.1","metric":100}]`},
	{Key: "hostRouting.routeOverlap.expectedCidrs", Outcome: Implemented, Here: "preflight's route-overlap check: each must route through the default route's interface", Sample: `["10.2.0.0/16"]`},
	{Key: "hostRouting.routeOverlap.mode", Outcome: Implemented, Here: "WARN (default) says so in preflight; STRICT refuses start", Sample: `"STRICT"`},
	// the pre-RP schema's sections
	{Key: "kubernetes.version", Outcome: Mapped, To: "components.kubernetes", Sample: `"1.35.0"`},
	{Key: "kubernetes.urlTemplate", Outcome: Refused, Did: "is the Kubernetes download URL template" + oldSchema, Not: "aks-flex-node downloads from upstream release URLs or bootstrap.offlineArtifacts", Sample: `"https://example.test/{{.Version}}"`},
	{Key: "containerd.version", Outcome: Mapped, To: "components.containerd", Sample: `"1.7.28"`},
	{Key: "containerd.pauseImage", Outcome: Mapped, To: "components.sandboxImage", Here: "aks-flex-node's choice (upstream ignores it since the RP schema): it means the same", Sample: `"mcr.microsoft.com/oss/kubernetes/pause:3.10"`},
	{Key: "containerd.metricsAddress", Outcome: Refused, Did: "is containerd's metrics listen address" + oldSchema, Not: "aks-flex-node's containerd serves no metrics", Sample: `"0.0.0.0:10257"`},
	{Key: "runc.version", Outcome: Mapped, To: "components.runc", Sample: `"1.3.0"`},
	{Key: "runc.url", Outcome: Refused, Did: "is runc's download URL" + oldSchema, Not: "aks-flex-node downloads from upstream release URLs or bootstrap.offlineArtifacts", Sample: `"https://example.test/runc"`},
	{Key: "cni.version", Outcome: Mapped, To: "networking.cniVersion", Sample: `"1.6.2"`},
	{Key: "paths.kubernetes.configDir", Outcome: Refused, Did: pathsDid, Not: fixedPaths, DropWhen: `"/etc/kubernetes"`, Sample: `"/srv/kubernetes"`},
	{Key: "paths.kubernetes.certsDir", Outcome: Refused, Did: pathsDid, Not: fixedPaths, DropWhen: `"/etc/kubernetes/certs"`, Sample: `"/srv/certs"`},
	{Key: "paths.kubernetes.manifestsDir", Outcome: Refused, Did: pathsDid, Not: fixedPaths, DropWhen: `"/etc/kubernetes/manifests"`, Sample: `"/srv/manifests"`},
	{Key: "paths.kubernetes.volumePluginDir", Outcome: Refused, Did: pathsDid, Not: fixedPaths, DropWhen: `"/etc/kubernetes/volumeplugins"`, Sample: `"/srv/volumeplugins"`},
	{Key: "paths.kubernetes.kubeletDir", Outcome: Refused, Did: pathsDid, Not: fixedPaths, DropWhen: `"/var/lib/kubelet"`, Sample: `"/srv/kubelet"`},
}

const (
	arcDid = "registers the machine with Azure Arc"
	arcNot = "aks-flex-node does not register hosts with Azure Arc: connect the host with azcmagent, then set only azure.arc.enabled to use its identity"
	// routeProtoNote is the reference page's word on the protocol number; the
	// number itself is internal/network's RouteProtocol.
	routeProtoNote = "proto 217"
	pathsDid       = "relocates a Kubernetes directory" + oldSchema
	// sampleCA is a placeholder the table test replaces with a real CA.
	sampleCA = "CA"
)

// upstreamByKey indexes the key entries (not the value aliases).
var upstreamByKey = func() map[string]*UpstreamKey {
	m := map[string]*UpstreamKey{}
	for i := range UpstreamKeys {
		if k := &UpstreamKeys[i]; k.Value == "" {
			m[k.Key] = k
		}
	}
	return m
}()

// upstreamChildren names the keys the table knows directly under path
// (for the pre-RP sections and the refused objects inside ours).
func upstreamChildren(path string) []string {
	seen := map[string]bool{}
	var out []string
	for key := range upstreamByKey {
		rest, ok := strings.CutPrefix(key, path+".")
		if !ok {
			continue
		}
		child, _, _ := strings.Cut(rest, ".")
		if !seen[child] {
			seen[child] = true
			out = append(out, child)
		}
	}
	sort.Strings(out)
	return out
}

// cloudAlias is the value alias of azure.cloud for v, if there is one.
func cloudAlias(v string) *UpstreamKey {
	for i := range UpstreamKeys {
		if k := &UpstreamKeys[i]; k.Key == "azure.cloud" && k.Value != "" && k.Value == v {
			return k
		}
	}
	return nil
}
