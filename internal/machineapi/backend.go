package machineapi

import "context"

// Backend is where the node's Machine lives: ARM (*Client) or, in
// upstream's in-cluster mode, a Kubernetes API path through the cluster
// connection (*InCluster). Both speak the same Machine JSON.
type Backend interface {
	// Get reads the Machine; (nil, nil) when there is none.
	Get(ctx context.Context) (*Machine, error)
	// Put creates or updates the Machine under pre and returns it as it
	// is afterwards.
	Put(ctx context.Context, m *Machine, pre Precondition) (*Machine, error)
	// Describe names the Machine in messages and records: its ARM
	// resource ID, or its cluster path.
	Describe() string
}

// StatusWriter is a Backend the node may write its Machine's status to
// (in-cluster mode; ARM's Machine status is read-only to a node).
type StatusWriter interface {
	PatchStatus(ctx context.Context, s Status) error
}

// Status is what the node reports on its Machine in in-cluster mode,
// as upstream's agent does: the provisioning state, the settings
// version (eTag) it observed and applied, and a message (the last
// decision or error).
type Status struct {
	ProvisioningState       string `json:"provisioningState,omitempty"`
	ObservedSettingsVersion string `json:"observedSettingsVersion,omitempty"`
	Message                 string `json:"message,omitempty"`
}

// Describe is the Machine's ARM resource ID.
func (c *Client) Describe() string { return c.o.ID.String() }

var _ Backend = (*Client)(nil)
