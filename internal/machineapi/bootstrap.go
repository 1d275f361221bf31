package machineapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/Azure/aks-flex-node/internal/config"
)

// BootstrapDataAPIVersion is the api-version of the agent pool's
// listBootstrapData action: the first preview that documents it
// (AgentPools_ListBootstrapData in the 2026-05-02-preview
// Microsoft.ContainerService API).
const BootstrapDataAPIVersion = "2026-05-02-preview"

// ListBootstrapDataPermission is the permission the action needs, for
// a 403's remedy.
const ListBootstrapDataPermission = "Microsoft.ContainerService/managedClusters/agentPools/listBootstrapData/action"

// maxBootstrapData bounds the action's answer: a config of a few KiB.
const maxBootstrapData = 1 << 20

// PoolID is an AKS agent pool: a pool of a cluster.
type PoolID struct {
	Cluster config.ClusterID
	Pool    string
}

// String is the pool's ARM resource ID.
func (p PoolID) String() string { return p.Cluster.String() + "/agentPools/" + p.Pool }

// poolForm is the human form of the pool ID rule.
const poolForm = "/subscriptions/<subscription GUID>/resourceGroups/<group>/providers/Microsoft.ContainerService/managedClusters/<cluster>/agentPools/<pool>"

// ParsePoolID reads an agent pool's ARM resource ID; ARM compares the
// fixed segments case-insensitively.
func ParsePoolID(s string) (PoolID, error) {
	i := strings.LastIndex(strings.ToLower(s), "/agentpools/")
	if i < 0 {
		return PoolID{}, fmt.Errorf("%q is not an agent pool resource ID (%s)", s, poolForm)
	}
	cl, err := config.ParseClusterID(s[:i])
	if err != nil {
		return PoolID{}, fmt.Errorf("%q is not an agent pool resource ID (%s): %w", s, poolForm, err)
	}
	pool := s[i+len("/agentPools/"):]
	if pool == "" || strings.ContainsAny(pool, "/?#") {
		return PoolID{}, fmt.Errorf("%q: the agent pool's name %q is not a name (%s)", s, pool, poolForm)
	}
	return PoolID{Cluster: cl, Pool: pool}, nil
}

// PoolClient calls an agent pool's actions through the machine client's
// pipeline (its token, retries and transport policy).
type PoolClient struct {
	c  *Client
	id PoolID
}

// NewPoolClient makes the client of pool id; o.ID is ignored, and an
// empty o.APIVersion is BootstrapDataAPIVersion.
func NewPoolClient(id PoolID, o Options) (*PoolClient, error) {
	o.ID = MachineID{Cluster: id.Cluster, Pool: id.Pool}
	if o.APIVersion == "" {
		o.APIVersion = BootstrapDataAPIVersion
	}
	c, err := New(o)
	if err != nil {
		return nil, fmt.Errorf("agent pool %s: %w", id, err)
	}
	return &PoolClient{c: c, id: id}, nil
}

// ListBootstrapData calls the pool's listBootstrapData action (POST
// <pool>/listBootstrapData with an empty request, as documented) and
// returns the pool's join data: a config document in upstream's layout
// (azure, components, networking, node). It holds a bootstrap token:
// the caller keeps it out of logs and writes it 0600.
func (p *PoolClient) ListBootstrapData(ctx context.Context) (map[string]any, error) {
	u := *p.c.base
	u.Path = p.c.o.ID.poolPath() + "/listBootstrapData"
	u.RawQuery = url.Values{"api-version": {p.c.o.APIVersion}}.Encode()
	req, err := p.c.newRequest(ctx, http.MethodPost, u.String(), struct{}{})
	if err != nil {
		return nil, err
	}
	resp, err := p.c.pl.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s/listBootstrapData: %w", p.id, err)
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		e := p.c.apiError("POST listBootstrapData", resp)
		e.ResourceID, e.Needs = p.id.String(), ListBootstrapDataPermission
		return nil, e
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBootstrapData+1))
	if err != nil {
		return nil, fmt.Errorf("POST %s/listBootstrapData: read the answer: %w", p.id, err)
	}
	if len(data) > maxBootstrapData {
		return nil, fmt.Errorf("POST %s/listBootstrapData: the answer is over %d bytes; a pool's bootstrap data is a config of a few KiB", p.id, maxBootstrapData)
	}
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil || doc == nil {
		// The error names the offset only: the answer holds a token.
		return nil, fmt.Errorf("POST %s/listBootstrapData: the answer is not a JSON object (the pool's bootstrap data): %v", p.id, jsonErrorShape(err))
	}
	return doc, nil
}

// jsonErrorShape is a decoding error without the input's bytes.
func jsonErrorShape(err error) string {
	switch e := err.(type) {
	case nil:
		return "null"
	case *json.SyntaxError:
		return fmt.Sprintf("syntax error at offset %d", e.Offset)
	case *json.UnmarshalTypeError:
		return fmt.Sprintf("a JSON %s, want an object", e.Value)
	}
	return "not JSON"
}
