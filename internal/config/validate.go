package config

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"text/template"
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

var (
	bootstrapTokenRE = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
	guidRE           = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	aksResourceIDRE  = regexp.MustCompile(`(?i)^/subscriptions/([^/]+)/resourceGroups/([-\w\._\(\)]+)/providers/Microsoft\.ContainerService/managedClusters/([A-Za-z0-9][-_A-Za-z0-9]{0,62})$`)
	dns1123LabelRE   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	labelNameRE      = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	versionRE        = regexp.MustCompile(`^v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$`)
	azureNameRE      = regexp.MustCompile(`^[-\w\._\(\)]{1,90}$`)
)

// BootstrapTokenFormat is the human form of the token rule.
const BootstrapTokenFormat = "<6 lowercase alphanumerics>.<16 lowercase alphanumerics>"

var knownClouds = []string{"AzurePublicCloud", "AzureChinaCloud", "AzureUSGovernmentCloud"}

// Validate checks a defaulted Config and returns every problem found.
func Validate(c *Config) ValidationErrors {
	var errs ValidationErrors
	add := func(path, format string, args ...any) {
		errs = append(errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}

	// azure
	a := &c.Azure
	if a.SubscriptionID != "" && !guidRE.MatchString(a.SubscriptionID) {
		add("azure.subscriptionId", "%q is not a GUID", a.SubscriptionID)
	}
	if a.TenantID != "" && !guidRE.MatchString(a.TenantID) {
		add("azure.tenantId", "%q is not a GUID", a.TenantID)
	}
	if !contains(knownClouds, a.Cloud) {
		add("azure.cloud", "%q is not a known cloud; use one of %s", a.Cloud, strings.Join(knownClouds, ", "))
	}
	if a.ResourceManagerEndpoint != "" {
		if u, err := url.Parse(a.ResourceManagerEndpoint); err != nil || u.Scheme != "https" || u.Host == "" {
			add("azure.resourceManagerEndpoint", "%q must be an https URL", a.ResourceManagerEndpoint)
		}
	}
	if a.TargetAgentPoolName != "" && !regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`).MatchString(a.TargetAgentPoolName) {
		add("azure.targetAgentPoolName", "%q must be 1-12 lowercase alphanumerics starting with a letter", a.TargetAgentPoolName)
	}
	if a.BootstrapToken != nil && !bootstrapTokenRE.MatchString(a.BootstrapToken.Token) {
		// Never echo the value: it is a credential.
		add("azure.bootstrapToken.token", "must be %s", BootstrapTokenFormat)
	}
	if mi := a.ManagedIdentity; mi != nil && mi.ClientID != "" && !guidRE.MatchString(mi.ClientID) {
		add("azure.managedIdentity.clientId", "%q is not a GUID", mi.ClientID)
	}
	if sp := a.ServicePrincipal; sp != nil {
		if !guidRE.MatchString(sp.TenantID) {
			add("azure.servicePrincipal.tenantId", "%q is not a GUID", sp.TenantID)
		}
		if !guidRE.MatchString(sp.ClientID) {
			add("azure.servicePrincipal.clientId", "%q is not a GUID", sp.ClientID)
		}
		if sp.ClientSecret == "" {
			add("azure.servicePrincipal.clientSecret", "is required with a service principal")
		}
	}
	arcOn := a.Arc != nil && a.Arc.Enabled
	if arcOn {
		if a.Arc.ResourceGroup == "" {
			add("azure.arc.resourceGroup", "is required when azure.arc.enabled is true")
		} else if !azureNameRE.MatchString(a.Arc.ResourceGroup) {
			add("azure.arc.resourceGroup", "%q is not a valid resource group name", a.Arc.ResourceGroup)
		}
		if a.Arc.Location == "" {
			add("azure.arc.location", "is required when azure.arc.enabled is true")
		}
		if a.Arc.MachineName != "" && !azureNameRE.MatchString(a.Arc.MachineName) {
			add("azure.arc.machineName", "%q is not a valid Azure resource name", a.Arc.MachineName)
		}
	}
	var azureMethods []string
	if a.ManagedIdentity != nil {
		azureMethods = append(azureMethods, "azure.managedIdentity")
	}
	if a.ServicePrincipal != nil {
		azureMethods = append(azureMethods, "azure.servicePrincipal")
	}
	if arcOn {
		azureMethods = append(azureMethods, "azure.arc")
	}
	switch {
	case len(azureMethods) == 0 && a.BootstrapToken == nil:
		add("azure", "no authentication method: set azure.bootstrapToken, azure.managedIdentity, azure.servicePrincipal or azure.arc")
	case len(azureMethods) > 1:
		add("azure", "at most one Azure authentication method may be set, found %s (a bootstrap token may be combined with one)", strings.Join(azureMethods, ", "))
	}
	if len(azureMethods) > 0 {
		if a.TargetCluster.ResourceID == "" {
			add("azure.targetCluster.resourceId", "is required with %s", azureMethods[0])
		}
	}
	if id := a.TargetCluster.ResourceID; id != "" {
		if m := aksResourceIDRE.FindStringSubmatch(id); m == nil {
			add("azure.targetCluster.resourceId", "%q is not an AKS resource ID; want /subscriptions/<id>/resourceGroups/<group>/providers/Microsoft.ContainerService/managedClusters/<name>", id)
		} else if !guidRE.MatchString(m[1]) {
			add("azure.targetCluster.resourceId", "subscription %q is not a GUID", m[1])
		}
	}

	// agent
	ag := &c.Agent
	if !contains([]string{"debug", "info", "warning", "error"}, ag.LogLevel) {
		add("agent.logLevel", "%q must be one of debug, info, warning, error", ag.LogLevel)
	}
	if !isAbsClean(ag.LogDir) {
		add("agent.logDir", "%q must be an absolute, clean path", ag.LogDir)
	}
	if msg := dns1123Subdomain(ag.NodeName); msg != "" {
		add("agent.nodeName", "%q %s", ag.NodeName, msg)
	}
	validDuration(ag.MachineReconcileInterval, "agent.machineReconcileInterval", add)
	// The layout is made here, once: layout.New is where the prefix rule
	// runs, and Layout hands out what it made.
	if l, err := layout.New("/", ag.HostPrefix, ag.LogDir); err != nil {
		add("agent.hostPrefix", "%s", err.Error())
	} else {
		c.layout = l
	}

	// components
	for _, f := range []struct{ path, v string }{
		{"components.kubernetes", c.Components.Kubernetes},
		{"components.containerd", c.Components.Containerd},
		{"components.runc", c.Components.Runc},
	} {
		if !versionRE.MatchString(f.v) {
			add(f.path, "%q is not a version like 1.2.3", f.v)
		}
	}
	if msg := imageRef(c.Components.SandboxImage); msg != "" {
		add("components.sandboxImage", "%q %s", c.Components.SandboxImage, msg)
	}

	// bootstrap
	if img := c.Bootstrap.OCIImage; img != "" {
		if strings.HasPrefix(img, "oci-layout://") {
			if _, _, err := ParseOCILayoutRef(img); err != nil {
				add("bootstrap.ociImage", "%v", err)
			}
		} else if msg := imageRef(img); msg != "" {
			add("bootstrap.ociImage", "%q %s; use a registry reference or oci-layout:///dir:tag", img, msg)
		}
	}
	if src := c.Bootstrap.OfflineArtifacts.Source; src != "" {
		if msg := artifactSource(src); msg != "" {
			add("bootstrap.offlineArtifacts.source", "%q %s", src, msg)
		}
	}
	if c.Bootstrap.OfflineArtifacts.PlainHTTP && !strings.HasPrefix(c.Bootstrap.OfflineArtifacts.Source, "oci://") {
		add("bootstrap.offlineArtifacts.plainHTTP", "applies only to an oci:// bootstrap.offlineArtifacts.source, which is %q", c.Bootstrap.OfflineArtifacts.Source)
	}
	for i, d := range c.Bootstrap.AdditionalHostDevices {
		if !isAbsClean(d) || !strings.HasPrefix(d, "/dev/") {
			add(fmt.Sprintf("bootstrap.additionalHostDevices[%d]", i), "%q must be a clean path under /dev/", d)
		}
	}

	// networking
	if ip := net.ParseIP(c.Networking.DNSServiceIP); ip == nil {
		add("networking.dnsServiceIP", "%q is not an IP address", c.Networking.DNSServiceIP)
	}
	if !versionRE.MatchString(c.Networking.CNIVersion) {
		add("networking.cniVersion", "%q is not a version like 1.2.3", c.Networking.CNIVersion)
	}

	// node
	n := &c.Node
	if n.MaxPods < 1 || n.MaxPods > 250 {
		add("node.maxPods", "%d must be between 1 and 250", n.MaxPods)
	}
	for _, k := range sortedKeys(n.Labels) {
		if msg := labelKey(k); msg != "" {
			add("node.labels."+k, "key %s", msg)
		}
		if msg := labelValue(n.Labels[k]); msg != "" {
			add("node.labels."+k, "value %q %s", n.Labels[k], msg)
		}
	}
	for i, t := range n.Taints {
		if msg := taint(t); msg != "" {
			add(fmt.Sprintf("node.taints[%d]", i), "%q %s", t, msg)
		}
	}
	k := &n.Kubelet
	if a.BootstrapToken != nil && len(azureMethods) == 0 {
		// Without Azure there is nowhere else to learn the API server from.
		if k.ClusterFQDN == "" {
			add("node.kubelet.clusterFQDN", "is required with a bootstrap token")
		}
		if k.CACertData == "" {
			add("node.kubelet.caCertData", "is required with a bootstrap token")
		}
	}
	if k.ClusterFQDN != "" {
		if _, err := ServerURL(k.ClusterFQDN); err != nil {
			add("node.kubelet.clusterFQDN", "%v", err)
		}
	}
	if k.CACertData != "" {
		if _, err := DecodeCACerts(k.CACertData); err != nil {
			add("node.kubelet.caCertData", "%v", err)
		}
	}
	if k.NodeIP != "" && net.ParseIP(k.NodeIP) == nil {
		add("node.kubelet.nodeIP", "%q is not an IP address", k.NodeIP)
	}
	if k.Verbosity != nil && (*k.Verbosity < 0 || *k.Verbosity > 10) {
		add("node.kubelet.verbosity", "%d must be between 0 and 10", *k.Verbosity)
	}
	if k.ImageGCHighThreshold < 1 || k.ImageGCHighThreshold > 100 {
		add("node.kubelet.imageGCHighThreshold", "%d must be between 1 and 100", k.ImageGCHighThreshold)
	}
	if k.ImageGCLowThreshold < 0 || k.ImageGCLowThreshold > 100 {
		add("node.kubelet.imageGCLowThreshold", "%d must be between 0 and 100", k.ImageGCLowThreshold)
	} else if k.ImageGCLowThreshold >= k.ImageGCHighThreshold {
		add("node.kubelet.imageGCLowThreshold", "%d must be lower than node.kubelet.imageGCHighThreshold (%d)", k.ImageGCLowThreshold, k.ImageGCHighThreshold)
	}

	if !versionRE.MatchString(c.NPD.Version) {
		add("npd.version", "%q is not a version like v1.2.3", c.NPD.Version)
	}
	return errs
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func isAbsClean(p string) bool {
	return strings.HasPrefix(p, "/") && pathClean(p) == p
}

func validDuration(s, path string, add func(string, string, ...any)) {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		add(path, "%q is not a duration such as 30s or 5m", s)
	case d <= 0:
		add(path, "%q must be positive", s)
	}
}

func dns1123Subdomain(s string) string {
	if s == "" {
		return "is empty and the hostname could not be read; set it explicitly"
	}
	if len(s) > 253 {
		return "is longer than 253 characters"
	}
	for _, l := range strings.Split(s, ".") {
		if len(l) > 63 || !dns1123LabelRE.MatchString(l) {
			return "is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', starting and ending with an alphanumeric)"
		}
	}
	return ""
}

func labelKey(k string) string {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	} else if msg := dns1123Subdomain(prefix); msg != "" || prefix == "" {
		return fmt.Sprintf("prefix %q is not a DNS-1123 subdomain", prefix)
	}
	if len(name) == 0 || len(name) > 63 || !labelNameRE.MatchString(name) {
		return fmt.Sprintf("name %q must be 1-63 characters of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric", name)
	}
	return ""
}

func labelValue(v string) string {
	if v == "" {
		return ""
	}
	if len(v) > 63 || !labelNameRE.MatchString(v) {
		return "must be at most 63 characters of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
	}
	return ""
}

func taint(t string) string {
	kv, effect, ok := strings.Cut(t, ":")
	if !ok {
		return "must be key[=value]:Effect"
	}
	if !contains([]string{"NoSchedule", "PreferNoSchedule", "NoExecute"}, effect) {
		return fmt.Sprintf("effect %q must be NoSchedule, PreferNoSchedule or NoExecute", effect)
	}
	key, value, _ := strings.Cut(kv, "=")
	if msg := labelKey(key); msg != "" {
		return "key " + msg
	}
	if msg := labelValue(value); msg != "" {
		return "value " + msg
	}
	return ""
}

// imageRef is a light syntax check of a container image reference; the
// registry client does the full parse when the image is pulled.
func imageRef(s string) string {
	if s == "" {
		return "is empty"
	}
	if strings.ContainsAny(s, " \t\n\"'\\") || strings.Contains(s, "://") {
		return "is not an image reference such as registry/repository:tag"
	}
	return ""
}

// ParseOCILayoutRef splits oci-layout:///dir:tag (or @sha256:...) into its
// directory and reference.
func ParseOCILayoutRef(s string) (dir, ref string, err error) {
	rest := strings.TrimPrefix(s, "oci-layout://")
	if !strings.HasPrefix(rest, "/") {
		return "", "", fmt.Errorf("%q: the directory of an oci-layout:// reference must be absolute (oci-layout:///dir:tag)", s)
	}
	if i := strings.LastIndex(rest, "@"); i > 0 {
		return rest[:i], rest[i+1:], nil
	}
	i := strings.LastIndex(rest, ":")
	if i <= 0 || i == len(rest)-1 || strings.Contains(rest[i:], "/") {
		return "", "", fmt.Errorf("%q: missing tag; want oci-layout:///dir:tag", s)
	}
	return rest[:i], rest[i+1:], nil
}

func artifactSource(s string) string {
	if _, err := template.New("source").Option("missingkey=error").Parse(s); err != nil {
		return "is not a valid template: " + err.Error()
	}
	switch {
	case strings.HasPrefix(s, "/"):
	case strings.HasPrefix(s, "file:///"):
	case strings.HasPrefix(s, "oci://") && len(s) > len("oci://"):
	default:
		return "must be an absolute path, file:///path or oci://registry/repository:tag"
	}
	return ""
}

// ServerURL turns node.kubelet.clusterFQDN into the API server URL:
// host -> https://host:443, host:port -> https://host:port. An https:// URL
// is accepted as long as it carries nothing but a host and port.
func ServerURL(s string) (string, error) {
	raw := s
	if !strings.Contains(s, "://") {
		raw = "https://" + s
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%q is not a host name, host:port or https URL", s)
	}
	switch {
	case u.Scheme != "https":
		return "", fmt.Errorf("%q must use https", s)
	case u.User != nil:
		return "", fmt.Errorf("%q must not carry user info", s)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return "", fmt.Errorf("%q must not have a path, query or fragment", s)
	case u.Hostname() == "":
		return "", fmt.Errorf("%q has no host", s)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("%q has an invalid port", s)
	}
	return "https://" + net.JoinHostPort(u.Hostname(), port), nil
}

// DecodeCACerts decodes caCertData: base64 of one or more PEM certificates.
func DecodeCACerts(s string) ([]*x509.Certificate, error) {
	data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("is not valid base64: %v", err)
	}
	var certs []*x509.Certificate
	for len(data) > 0 {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse: %v", len(certs)+1, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("holds no PEM certificate (want base64 of a PEM bundle)")
	}
	return certs, nil
}

// CAPEM returns node.kubelet.caCertData decoded: the PEM bundle. Validation
// has already proven it decodes; an unset value yields nil.
func (c *Config) CAPEM() []byte {
	data, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(c.Node.Kubelet.CACertData))
	return data
}
