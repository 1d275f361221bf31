package machineapi

import (
	"fmt"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/identity"
)

// ARMIdentity is the identity that talks to ARM for config c: its Azure
// identity (managed identity, service principal or Arc), also when a
// bootstrap token joins the kubelet. ok is false when c has none.
func ARMIdentity(c *config.Config, read identity.SecretFileReader) (s identity.Spec, ok bool, err error) {
	cc := *c
	cc.Azure.BootstrapToken = nil
	return identity.FromConfig(&cc, read)
}

// FromConfig makes the client of the Machine config c registers. ok is
// false when c names no target cluster (nothing talks to ARM then). The
// token source is given (tokens cached in the state dir, or not cached
// where nothing may be written yet).
func FromConfig(c *config.Config, src func(identity.Spec) TokenSource, read identity.SecretFileReader) (cl *Client, ok bool, err error) {
	id, ok, err := IDFromConfig(c)
	if !ok || err != nil {
		return nil, ok, err
	}
	spec, has, err := ARMIdentity(c, read)
	if err != nil {
		return nil, true, fmt.Errorf("the Azure identity for ARM: %w", err)
	}
	if !has {
		return nil, true, &NoIdentityError{ID: id}
	}
	endpoint, audience := Endpoint(c.Azure.Cloud, c.Azure.ResourceManagerEndpoint)
	ver := c.Azure.MachineAPIVersion
	if ver == "" {
		ver = config.DefaultMachineAPIVersion
	}
	cl, err = New(Options{ID: id, Endpoint: endpoint, Audience: audience, APIVersion: ver, Tokens: src(spec), Identity: spec.String()})
	return cl, true, err
}

// NoIdentityError says a config names a target cluster but no Azure
// identity to register the Machine with (a bootstrap token alone).
type NoIdentityError struct{ ID MachineID }

func (e *NoIdentityError) Error() string {
	return fmt.Sprintf("AKS Machine %s is not registered: the config has no Azure identity for Azure Resource Manager (a bootstrap token joins the kubelet only); set azure.managedIdentity, azure.servicePrincipal or azure.arc", e.ID)
}

// Record is what the last registration did, kept in the state dir for
// status and debug.
type Record struct {
	ResourceID string    `json:"resourceId"`
	Outcome    Outcome   `json:"outcome,omitempty"`
	ETag       string    `json:"eTag,omitempty"`
	Version    string    `json:"kubernetesVersion,omitempty"`
	Error      string    `json:"error,omitempty"`
	Code       string    `json:"code,omitempty"`
	At         time.Time `json:"at"`
}

// Registered says the Machine is registered.
func (r Record) Registered() bool { return r.Error == "" && r.Outcome != "" }

// Line is the record in one line, as status shows it.
func (r Record) Line() string {
	if r.Registered() {
		return fmt.Sprintf("AKS Machine %s %s (Kubernetes %s, eTag %s) at %s", r.ResourceID, r.Outcome, r.Version, r.ETag, r.At.Format(time.RFC3339))
	}
	return "AKS Machine " + r.ResourceID + " NOT registered: " + strings.TrimSpace(r.Error)
}
