package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// ClusterID is a parsed azure.targetCluster.resourceId.
type ClusterID struct {
	SubscriptionID, ResourceGroup, Name string
}

// String is the canonical resource ID.
func (c ClusterID) String() string {
	return "/subscriptions/" + c.SubscriptionID + "/resourceGroups/" + c.ResourceGroup +
		"/providers/Microsoft.ContainerService/managedClusters/" + c.Name
}

// clusterIDForm is the human form of the cluster ID rule.
const clusterIDForm = "/subscriptions/<subscription GUID>/resourceGroups/<group>/providers/Microsoft.ContainerService/managedClusters/<name>"

// ParseClusterID reads an AKS cluster's ARM resource ID. ARM compares the
// fixed segments case-insensitively; the names are kept as written.
func ParseClusterID(s string) (ClusterID, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 9 || parts[0] != "" {
		return ClusterID{}, fmt.Errorf("%q is not a managed cluster resource ID (%s)", s, clusterIDForm)
	}
	for i, want := range map[int]string{1: "subscriptions", 3: "resourceGroups", 5: "providers", 6: "Microsoft.ContainerService", 7: "managedClusters"} {
		if !strings.EqualFold(parts[i], want) {
			return ClusterID{}, fmt.Errorf("%q: segment %d is %q, want %q (%s)", s, i, parts[i], want, clusterIDForm)
		}
	}
	id := ClusterID{SubscriptionID: parts[2], ResourceGroup: parts[4], Name: parts[8]}
	switch {
	case !guidRE().MatchString(id.SubscriptionID):
		return ClusterID{}, fmt.Errorf("%q: subscription %q is not a GUID", s, id.SubscriptionID)
	case !resourceGroupRE().MatchString(id.ResourceGroup) || strings.HasSuffix(id.ResourceGroup, "."):
		return ClusterID{}, fmt.Errorf("%q: resource group %q must be 1-90 letters, digits, '.', '_', '-', '(' or ')', not ending in '.'", s, id.ResourceGroup)
	case !clusterNameRE().MatchString(id.Name):
		return ClusterID{}, fmt.Errorf("%q: cluster name %q must be 1-63 letters, digits, '_' or '-', starting and ending with a letter or digit", s, id.Name)
	}
	return id, nil
}

var (
	resourceGroupRE = lazyRE(`^[-\w.()]{1,90}$`)
	clusterNameRE   = lazyRE(`^[a-zA-Z0-9]$|^[a-zA-Z0-9][-_a-zA-Z0-9]{0,61}[a-zA-Z0-9]$`)
	// AKS agent pool names: lowercase, starting with a letter, at most 12
	// characters for Linux pools.
	agentPoolRE = lazyRE(`^[a-z][a-z0-9]{0,11}$`)
	locationRE  = lazyRE(`^[a-z0-9]{1,64}$`)
	apiVerRE    = lazyRE(`^[0-9]{4}-[0-9]{2}-[0-9]{2}(-preview)?$`)
)

// ARM says the config registers the node as an AKS Machine.
func (a *Azure) ARM() bool { return a.TargetCluster != nil && a.TargetCluster.ResourceID != "" }

// IdentityMethod is the Azure identity the node has (not a bootstrap
// token): the one that talks to ARM, next to a bootstrap token for the
// kubelet, or the one the kubelet signs in with too. "" for none.
func (a *Azure) IdentityMethod() string {
	for _, m := range azureMethods(a) {
		if m != "azure."+MethodBootstrapToken {
			return strings.TrimPrefix(m, "azure.")
		}
	}
	return ""
}

// arm checks upstream's ARM keys and the machine API's.
func (v *validator) arm(c *Config) {
	a := &c.Azure
	if a.SubscriptionID != "" && !guidRE().MatchString(a.SubscriptionID) {
		v.add("azure.subscriptionId", "%q is not a GUID", a.SubscriptionID)
	}
	if tc := a.TargetCluster; tc != nil {
		if tc.Location != "" && !locationRE().MatchString(tc.Location) {
			v.add("azure.targetCluster.location", "%q is not an Azure region name such as eastus", tc.Location)
		}
		if tc.ResourceID != "" {
			if id, err := ParseClusterID(tc.ResourceID); err != nil {
				v.add("azure.targetCluster.resourceId", "%v", err)
			} else if a.SubscriptionID != "" && !strings.EqualFold(a.SubscriptionID, id.SubscriptionID) {
				v.add("azure.subscriptionId", "%q is not the subscription of azure.targetCluster.resourceId (%s)", a.SubscriptionID, id.SubscriptionID)
			}
		}
	}
	if p := a.TargetAgentPoolName; p != "" && !agentPoolRE().MatchString(p) {
		v.add("azure.targetAgentPoolName", "%q must be 1-12 lowercase letters and digits, starting with a letter", p)
	}
	if e := a.ResourceManagerEndpoint; e != "" {
		if msg := armEndpoint(e); msg != "" {
			v.add("azure.resourceManagerEndpoint", "%q %s", e, msg)
		}
	}
	if ver := a.MachineAPIVersion; ver != "" {
		if _, err := time.Parse("2006-01-02", strings.TrimSuffix(ver, "-preview")); err != nil || !apiVerRE().MatchString(ver) {
			v.add("azure.machineApiVersion", "%q is not an ARM api-version such as %s (YYYY-MM-DD, optionally -preview)", ver, DefaultMachineAPIVersion)
		}
	}
	v.machineClient(c)
	v.armNeeds(c)
}

// armNeeds checks what registration needs and what only it uses.
func (v *validator) armNeeds(c *Config) {
	a := &c.Azure
	if c.Agent.MachineClient.InCluster() {
		return // machine_client.go checks what in-cluster mode needs
	}
	if !a.ARM() {
		for _, f := range []struct {
			path string
			set  bool
		}{
			{"agent.requireMachineRegistration", c.Agent.RequireMachineRegistration},
			{"azure.targetAgentPoolName", a.TargetAgentPoolName != ""},
			{"azure.machineApiVersion", a.MachineAPIVersion != ""},
		} {
			if f.set {
				v.add(f.path, "applies only to AKS Machine registration: set azure.targetCluster.resourceId too, or remove it")
			}
		}
		return
	}
	// Upstream's generator writes a target cluster next to a bootstrap
	// token alone; such a config loads, and start says it registers no
	// Machine. Only a required registration needs the identity here.
	if a.IdentityMethod() == "" && c.Agent.RequireMachineRegistration {
		v.add("agent.requireMachineRegistration", "registering the AKS Machine needs an Azure identity for Azure Resource Manager: set azure.managedIdentity, azure.servicePrincipal or azure.arc (next to azure.bootstrapToken, which then only joins the kubelet)")
	}
}

// armEndpoint says what is wrong with an ARM endpoint, "" if nothing.
func armEndpoint(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "is not a URL"
	case u.Scheme != "https":
		return "must be an https URL (Azure Resource Manager is only reached over TLS)"
	case u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return "must be https://host[:port] with no user, query or fragment"
	case strings.Trim(u.Path, "/") != "":
		return "must have no path (the machine API's paths are added to it)"
	}
	return ""
}
