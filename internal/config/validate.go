package config

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/Azure/aks-flex-node/internal/layout"
)

// FieldError is one validation problem, addressed by its JSON path the way
// Ignition's reports are, so a user can find the key in their file.
type FieldError struct {
	Path string
	Msg  string
}

func (e FieldError) Error() string { return e.Path + ": " + e.Msg }

// ValidationErrors reports every problem at once: fixing a config one error
// per run is miserable on a host reached through a serial console.
type ValidationErrors []FieldError

func (es ValidationErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// The rules' regular expressions are compiled on first use, not at
// init: every run of the binary pays for init, and the credential plugin
// the kubelet runs (token kubelogin) validates no config.
var (
	bootstrapTokenRE = lazyRE(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
	guidRE           = lazyRE(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	versionRE        = lazyRE(`^v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$`)
)

// lazyRE compiles expr once, when first asked for.
func lazyRE(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// BootstrapTokenFormat is the human form of the token rule.
const BootstrapTokenFormat = "<6 lowercase alphanumerics>.<16 lowercase alphanumerics>"

var knownClouds = []string{"AzurePublicCloud", "AzureChinaCloud", "AzureUSGovernmentCloud"}

// validator collects every problem of one config, in file order.
type validator struct{ errs ValidationErrors }

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Validate checks a defaulted Config and returns every problem found. It
// also makes the config's Layout: layout.New is where the prefix rule runs.
func Validate(c *Config) ValidationErrors {
	v := &validator{}
	methods := azureMethods(&c.Azure)
	v.azureIdentities(&c.Azure)
	v.azureAuth(&c.Azure, methods)
	v.arm(c)
	v.agent(c)
	v.components(&c.Components)
	v.bootstrap(&c.Bootstrap)
	v.networking(&c.Networking)
	v.hostRouting(&c.HostRouting, &c.Networking)
	v.node(&c.Node)
	// Nothing learns the API server from Azure yet (no cluster
	// discovery), so every method needs it in the config.
	method := ""
	if len(methods) > 0 {
		method = methods[0]
	}
	v.apiServer(&c.Node.Kubelet, method)
	v.kubelet(&c.Node.Kubelet)
	return v.errs
}

// The authentication methods, as Azure.Method names them (their keys).
const (
	MethodBootstrapToken   = "bootstrapToken"
	MethodManagedIdentity  = "managedIdentity"
	MethodServicePrincipal = "servicePrincipal"
	MethodArc              = "arc"
)

// Method is how the node signs in: one of the Method constants, the
// first set (validation allows exactly one), or "" for none.
func (a *Azure) Method() string {
	if ms := azureMethods(a); len(ms) > 0 {
		return strings.TrimPrefix(ms[0], "azure.")
	}
	return ""
}

// Identity says the node signs in with an Azure identity (not a
// bootstrap token): its kubelet uses the credential plugin.
func (a *Azure) Identity() bool {
	m := a.Method()
	return m != "" && m != MethodBootstrapToken
}

// azureMethods names the authentication methods set, in the order
// messages list them.
func azureMethods(a *Azure) []string {
	var ms []string
	if a.BootstrapToken != nil {
		ms = append(ms, "azure.bootstrapToken")
	}
	if a.ManagedIdentity != nil {
		ms = append(ms, "azure.managedIdentity")
	}
	if a.ServicePrincipal != nil {
		ms = append(ms, "azure.servicePrincipal")
	}
	if a.Arc != nil && a.Arc.Enabled {
		ms = append(ms, "azure.arc")
	}
	return ms
}

// azureIdentities checks the IDs, names and endpoints under azure.
func (v *validator) azureIdentities(a *Azure) {
	if a.TenantID != "" && !guidRE().MatchString(a.TenantID) {
		v.add("azure.tenantId", "%q is not a GUID", a.TenantID)
	}
	if !contains(knownClouds, a.Cloud) {
		v.add("azure.cloud", "%q is not a known cloud; use one of %s", a.Cloud, strings.Join(knownClouds, ", "))
	}
	if a.BootstrapToken != nil && !bootstrapTokenRE().MatchString(a.BootstrapToken.Token) {
		// Never echo the value: it is a credential.
		v.add("azure.bootstrapToken.token", "must be %s", BootstrapTokenFormat)
	}
	if mi := a.ManagedIdentity; mi != nil && mi.ClientID != "" && !guidRE().MatchString(mi.ClientID) {
		v.add("azure.managedIdentity.clientId", "%q is not a GUID", mi.ClientID)
	}
	if a.AuthorityHost != "" {
		if msg := authorityHost(a.AuthorityHost); msg != "" {
			v.add("azure.authorityHost", "%q %s", a.AuthorityHost, msg)
		}
	}
	if sp := a.ServicePrincipal; sp != nil {
		v.servicePrincipal(a, sp)
	}
}

// servicePrincipal checks the tenant, the client and its one credential.
func (v *validator) servicePrincipal(a *Azure, sp *ServicePrincipal) {
	switch {
	case sp.TenantID == "" && a.TenantID == "":
		v.add("azure.servicePrincipal.tenantId", "is required with a service principal (or set azure.tenantId)")
	case sp.TenantID != "" && !guidRE().MatchString(sp.TenantID):
		v.add("azure.servicePrincipal.tenantId", "%q is not a GUID", sp.TenantID)
	}
	if !guidRE().MatchString(sp.ClientID) {
		v.add("azure.servicePrincipal.clientId", "%q is not a GUID", sp.ClientID)
	}
	switch p := sp.ClientCertificatePath; {
	case sp.ClientSecret == "" && p == "":
		v.add("azure.servicePrincipal", "needs a credential: set clientSecret or clientCertificatePath")
	case sp.ClientSecret != "" && p != "":
		// Never echo the secret.
		v.add("azure.servicePrincipal", "set clientSecret or clientCertificatePath, not both")
	case p != "" && !isAbsClean(p):
		v.add("azure.servicePrincipal.clientCertificatePath", "%q must be an absolute, clean path", p)
	}
}

// azureAuth checks that exactly one way to join is set, or, with AKS
// Machine registration, a bootstrap token for the kubelet next to one
// Azure identity for ARM (upstream's recommended pair).
func (v *validator) azureAuth(a *Azure, methods []string) {
	switch {
	case len(methods) == 0:
		v.add("azure", "no authentication method: set one of azure.bootstrapToken, azure.managedIdentity, azure.servicePrincipal or azure.arc")
	case len(methods) == 2 && methods[0] == "azure.bootstrapToken" && a.ARM():
		// The token joins the kubelet; the identity registers the Machine.
	case len(methods) > 1 && methods[0] == "azure.bootstrapToken":
		v.add("azure", "exactly one authentication method may be set, found %s; an Azure identity next to a bootstrap token is used only to register the AKS Machine: set azure.targetCluster.resourceId, or keep one", strings.Join(methods, ", "))
	case len(methods) > 1:
		v.add("azure", "exactly one authentication method may be set, found %s", strings.Join(methods, ", "))
	}
}

func (v *validator) agent(c *Config) {
	ag := &c.Agent
	if !contains([]string{"debug", "info", "warning", "error"}, ag.LogLevel) {
		v.add("agent.logLevel", "%q must be one of debug, info, warning, error", ag.LogLevel)
	}
	if !isAbsClean(ag.LogDir) {
		v.add("agent.logDir", "%q must be an absolute, clean path", ag.LogDir)
	}
	if msg := dns1123Subdomain(ag.NodeName); msg != "" {
		v.add("agent.nodeName", "%q %s", ag.NodeName, msg)
	}
	v.duration(ag.MachineReconcileInterval, "agent.machineReconcileInterval")
	if ag.MetricsAddress != "" {
		if _, err := MetricsListenAddress(ag.MetricsAddress); err != nil {
			v.add("agent.metricsAddress", "%v", err)
		}
	}
	// The layout is made here, once: layout.New is where the prefix rule
	// runs, and Layout hands out what it made.
	if l, err := layout.New("/", ag.HostPrefix, ag.LogDir); err != nil {
		v.add("agent.hostPrefix", "%s", err.Error())
	} else {
		c.layout = l
	}
}

func (v *validator) components(c *Components) {
	for _, f := range []struct{ path, v string }{
		{"components.kubernetes", c.Kubernetes},
		{"components.containerd", c.Containerd},
		{"components.runc", c.Runc},
	} {
		if !versionRE().MatchString(f.v) {
			v.add(f.path, "%q is not a version like 1.2.3", f.v)
		}
	}
	if msg := imageRef(c.SandboxImage); msg != "" {
		v.add("components.sandboxImage", "%q %s", c.SandboxImage, msg)
	}
}

func (v *validator) bootstrap(b *Bootstrap) {
	if img := b.OCIImage; img != "" {
		if strings.HasPrefix(img, "oci-layout://") {
			if _, _, err := ParseOCILayoutRef(img); err != nil {
				v.add("bootstrap.ociImage", "%v", err)
			}
		} else if msg := imageRef(img); msg != "" {
			v.add("bootstrap.ociImage", "%q %s; use a registry reference or oci-layout:///dir:tag", img, msg)
		}
	}
	if b.OCIImagePlainHTTP && (b.OCIImage == "" || strings.HasPrefix(b.OCIImage, "oci-layout://")) {
		v.add("bootstrap.ociImagePlainHTTP", "applies only to a registry reference in bootstrap.ociImage, which is %q", b.OCIImage)
	}
	if src := b.OfflineArtifacts.Source; src != "" {
		if msg := artifactSource(src); msg != "" {
			v.add("bootstrap.offlineArtifacts.source", "%q %s", src, msg)
		}
	}
	if b.OfflineArtifacts.PlainHTTP && !strings.HasPrefix(b.OfflineArtifacts.Source, "oci://") {
		v.add("bootstrap.offlineArtifacts.plainHTTP", "applies only to an oci:// bootstrap.offlineArtifacts.source, which is %q", b.OfflineArtifacts.Source)
	}
	for i, d := range b.AdditionalHostDevices {
		if !isAbsClean(d) || !strings.HasPrefix(d, "/dev/") {
			v.add(fmt.Sprintf("bootstrap.additionalHostDevices[%d]", i), "%q must be a clean path under /dev/", d)
		}
	}
}

// node checks the node's pod limit, labels and taints.
func (v *validator) node(n *Node) {
	if n.MaxPods < 1 || n.MaxPods > 250 {
		v.add("node.maxPods", "%d must be between 1 and 250", n.MaxPods)
	}
	for _, k := range sortedKeys(n.Labels) {
		if msg := labelKey(k); msg != "" {
			v.add("node.labels."+k, "key %s", msg)
		}
		if msg := labelValue(n.Labels[k]); msg != "" {
			v.add("node.labels."+k, "value %q %s", n.Labels[k], msg)
		}
	}
	for i, t := range n.Taints {
		if msg := taint(t); msg != "" {
			v.add(fmt.Sprintf("node.taints[%d]", i), "%q %s", t, msg)
		}
	}
}

// apiServer checks where the kubelet finds the API server and its CA,
// which every method needs (method names the one set, "" for none).
func (v *validator) apiServer(k *Kubelet, method string) {
	with := "with " + method
	if method != "azure.bootstrapToken" && method != "" {
		with += " (aks-flex-node does not discover the cluster from Azure)"
	}
	if method != "" {
		if k.ClusterFQDN == "" {
			v.add("node.kubelet.clusterFQDN", "is required %s", with)
		}
		if k.CACertData == "" {
			v.add("node.kubelet.caCertData", "is required %s", with)
		}
	}
	if k.ClusterFQDN != "" {
		if _, err := ServerURL(k.ClusterFQDN); err != nil {
			v.add("node.kubelet.clusterFQDN", "%v", err)
		}
	}
	if k.CACertData != "" {
		if _, err := DecodeCACerts(k.CACertData); err != nil {
			v.add("node.kubelet.caCertData", "%v", err)
		}
	}
}

// kubelet checks the kubelet's own settings.
func (v *validator) kubelet(k *Kubelet) {
	if k.NodeIP != "" && net.ParseIP(k.NodeIP) == nil {
		v.add("node.kubelet.nodeIP", "%q is not an IP address", k.NodeIP)
	}
	if k.Verbosity != nil && (*k.Verbosity < 0 || *k.Verbosity > 10) {
		v.add("node.kubelet.verbosity", "%d must be between 0 and 10", *k.Verbosity)
	}
	if k.ImageGCHighThreshold < 1 || k.ImageGCHighThreshold > 100 {
		v.add("node.kubelet.imageGCHighThreshold", "%d must be between 1 and 100", k.ImageGCHighThreshold)
	}
	if k.ImageGCLowThreshold < 0 || k.ImageGCLowThreshold > 100 {
		v.add("node.kubelet.imageGCLowThreshold", "%d must be between 0 and 100", k.ImageGCLowThreshold)
	} else if k.ImageGCLowThreshold >= k.ImageGCHighThreshold {
		v.add("node.kubelet.imageGCLowThreshold", "%d must be lower than node.kubelet.imageGCHighThreshold (%d)", k.ImageGCLowThreshold, k.ImageGCHighThreshold)
	}
}

func (v *validator) duration(s, path string) {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		v.add(path, "%q is not a duration such as 30s or 5m", s)
	case d <= 0:
		v.add(path, "%q must be positive", s)
	}
}
