package machineapi

// Machine is the AKS Machine resource as the machine API documents it
// (Microsoft.ContainerService managedClusters/agentPools/machines); only
// the fields the node reads or writes.
type Machine struct {
	ID         string             `json:"id,omitempty"`
	Name       string             `json:"name,omitempty"`
	Type       string             `json:"type,omitempty"`
	Properties *MachineProperties `json:"properties,omitempty"`
}

// MachineProperties are the Machine's properties. ETag is the settings
// version: it changes with every change of the Machine.
type MachineProperties struct {
	Kubernetes        *KubernetesProfile `json:"kubernetes,omitempty"`
	Tags              map[string]string  `json:"tags,omitempty"`
	ProvisioningState string             `json:"provisioningState,omitempty"`
	ETag              string             `json:"eTag,omitempty"`
	Status            *MachineStatus     `json:"status,omitempty"`
}

// KubernetesProfile is what the Machine says its node runs.
type KubernetesProfile struct {
	OrchestratorVersion        string            `json:"orchestratorVersion,omitempty"`
	CurrentOrchestratorVersion string            `json:"currentOrchestratorVersion,omitempty"`
	MaxPods                    *int32            `json:"maxPods,omitempty"`
	NodeLabels                 map[string]string `json:"nodeLabels,omitempty"`
	NodeTaints                 []string          `json:"nodeTaints,omitempty"`
	NodeInitializationTaints   []string          `json:"nodeInitializationTaints,omitempty"`
	KubeletConfig              *KubeletConfig    `json:"kubeletConfig,omitempty"`
	NodeName                   string            `json:"nodeName,omitempty"`
}

// KubeletConfig holds the kubelet settings a Machine carries.
type KubeletConfig struct {
	ImageGcHighThreshold *int32 `json:"imageGcHighThreshold,omitempty"`
	ImageGcLowThreshold  *int32 `json:"imageGcLowThreshold,omitempty"`
}

// MachineStatus is the read-only status ARM reports.
type MachineStatus struct {
	ProvisioningError *ErrorDetail `json:"provisioningError,omitempty"`
}

// ErrorDetail is ARM's error shape (the error envelope's "error").
type ErrorDetail struct {
	Code    string        `json:"code,omitempty"`
	Message string        `json:"message,omitempty"`
	Target  string        `json:"target,omitempty"`
	Details []ErrorDetail `json:"details,omitempty"`
}

// machineList is a page of a list: value and the next page's link.
type machineList struct {
	Value    []Machine `json:"value"`
	NextLink string    `json:"nextLink,omitempty"`
}

// The provisioning states that end an operation.
const (
	StateSucceeded = "Succeeded"
	StateFailed    = "Failed"
	StateCanceled  = "Canceled"
)

// Terminal says a provisioningState (or an operation's status) is final.
func Terminal(state string) bool {
	switch state {
	case StateSucceeded, StateFailed, StateCanceled:
		return true
	}
	return false
}

// Version is the Kubernetes version the Machine names: the goal's, or
// the current one when the goal is empty.
func (m *Machine) Version() string {
	if m == nil || m.Properties == nil || m.Properties.Kubernetes == nil {
		return ""
	}
	k := m.Properties.Kubernetes
	if k.OrchestratorVersion != "" {
		return k.OrchestratorVersion
	}
	return k.CurrentOrchestratorVersion
}

// ETag is the Machine's settings version, "" for none.
func (m *Machine) ETag() string {
	if m == nil || m.Properties == nil {
		return ""
	}
	return m.Properties.ETag
}
