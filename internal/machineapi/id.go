package machineapi

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/Azure/aks-flex-node/internal/config"
)

// MaxMachineNameLength is AKS's limit on a machine's name.
const MaxMachineNameLength = 40

// MachineID is one AKS Machine: a machine of an agent pool of a cluster.
type MachineID struct {
	Cluster config.ClusterID
	Pool    string
	Name    string
}

// String is the Machine's ARM resource ID.
func (m MachineID) String() string {
	return m.Cluster.String() + "/agentPools/" + m.Pool + "/machines/" + m.Name
}

// PoolID is the agent pool's resource ID.
func (m MachineID) PoolID() string { return m.Cluster.String() + "/agentPools/" + m.Pool }

// path is String with each name escaped for a URL path.
func (m MachineID) path() string { return m.poolPath() + "/machines/" + url.PathEscape(m.Name) }

func (m MachineID) poolPath() string {
	c := m.Cluster
	return "/subscriptions/" + url.PathEscape(c.SubscriptionID) + "/resourceGroups/" + url.PathEscape(c.ResourceGroup) +
		"/providers/Microsoft.ContainerService/managedClusters/" + url.PathEscape(c.Name) + "/agentPools/" + url.PathEscape(m.Pool)
}

// CheckMachineName applies AKS's machine-name rule to a node name: at
// most 40 characters and no dots. The message names the key to change.
func CheckMachineName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("agent.nodeName is empty; set it to the AKS Machine's name (at most %d characters, no dots)", MaxMachineNameLength)
	case len(name) > MaxMachineNameLength:
		return fmt.Errorf("agent.nodeName %q has %d characters; an AKS Machine's name has at most %d: set agent.nodeName to a shorter name", name, len(name), MaxMachineNameLength)
	case strings.Contains(name, "."):
		return fmt.Errorf("agent.nodeName %q contains a dot; an AKS Machine's name has none: set agent.nodeName to a name without dots (the host's short name, say)", name)
	}
	return nil
}

// IDFromConfig is the Machine a config registers:
// <azure.targetCluster.resourceId>/agentPools/<azure.targetAgentPoolName>/machines/<agent.nodeName>.
// ok is false when the config names no target cluster.
func IDFromConfig(c *config.Config) (id MachineID, ok bool, err error) {
	if !c.Azure.ARM() {
		return MachineID{}, false, nil
	}
	cl, err := config.ParseClusterID(c.Azure.TargetCluster.ResourceID)
	if err != nil {
		return MachineID{}, true, fmt.Errorf("azure.targetCluster.resourceId: %w", err)
	}
	if err := CheckMachineName(c.Agent.NodeName); err != nil {
		return MachineID{}, true, err
	}
	pool := c.Azure.TargetAgentPoolName
	if pool == "" {
		pool = config.DefaultTargetAgentPoolName
	}
	return MachineID{Cluster: cl, Pool: pool, Name: c.Agent.NodeName}, true, nil
}
