package machineapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
)

// InClusterOptions make an InCluster client.
type InClusterOptions struct {
	// Server is the API server's URL (https://host[:port]) and
	// HTTPClient the node's client for it (its credential, the product's
	// timeouts: kubeclient.HTTPClient).
	Server     string
	HTTPClient *http.Client
	// Endpoint is agent.machineClient.endpointUrl, a Kubernetes API path
	// (a Service through the API server's proxy, say); Name the Machine's
	// name (agent.nodeName).
	Endpoint, Name string
}

// InCluster reads and writes the node's Machine through the cluster
// connection, as upstream's in-cluster mode does: GET and PUT
// <endpoint>/machines/<name> with the same Machine JSON as ARM's, and
// PATCH <endpoint>/machines/<name>/status with {"properties":{"status":…}}.
// Each call is one request: the agent's loop is the retry.
type InCluster struct {
	hc   *http.Client
	base url.URL
	name string
}

// NewInCluster makes the client; the endpoint must be an absolute path
// (the config's validation says so at its JSON path).
func NewInCluster(o InClusterOptions) (*InCluster, error) {
	server, err := url.Parse(strings.TrimRight(o.Server, "/"))
	if err != nil || server.Scheme != "https" || server.Host == "" {
		return nil, fmt.Errorf("the API server %q: want https://host[:port]", o.Server)
	}
	ep, err := url.Parse(o.Endpoint)
	if err != nil || ep.Scheme != "" || ep.Host != "" || !strings.HasPrefix(ep.Path, "/") {
		return nil, fmt.Errorf("agent.machineClient.endpointUrl %q: want a Kubernetes API path such as /api/v1/namespaces/NS/services/http:NAME:PORT/proxy", o.Endpoint)
	}
	if o.HTTPClient == nil || o.Name == "" {
		return nil, fmt.Errorf("in-cluster machine client: the node's HTTP client and the Machine's name are required")
	}
	b := *server
	b.Path = path.Join(server.Path, path.Clean(ep.Path))
	return &InCluster{hc: o.HTTPClient, base: b, name: o.Name}, nil
}

func (c *InCluster) url(status bool) string {
	u := c.base
	u.Path = path.Join(u.Path, "machines", c.name)
	if status {
		u.Path += "/status"
	}
	return u.String()
}

// Describe is the Machine's path on the API server.
func (c *InCluster) Describe() string { return path.Join(c.base.Path, "machines", c.name) }

// Get reads the Machine; (nil, nil) when the endpoint answers 404 of its
// own. A 404 from the API server itself (a Kubernetes Status: the
// Service or namespace is not there) is an error: the endpoint is wrong,
// not the Machine absent.
func (c *InCluster) Get(ctx context.Context) (*Machine, error) {
	resp, err := c.do(ctx, http.MethodGet, c.url(false), nil, nil)
	if err != nil {
		return nil, err
	}
	defer drain(resp)
	switch {
	case resp.StatusCode == http.StatusNotFound:
		if e, kube := c.failure("GET", resp); kube {
			return nil, e
		}
		return nil, nil
	case resp.StatusCode != http.StatusOK:
		e, _ := c.failure("GET", resp)
		return nil, e
	}
	return c.decode("GET", resp.Body)
}

// Put creates or updates the Machine. An endpoint that does not take
// the write (403, 405 or 204: its controller made the Machine) is read
// instead, as upstream adopts a Machine made for it; the caller checks
// the version it answers.
func (c *InCluster) Put(ctx context.Context, m *Machine, pre Precondition) (*Machine, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	if pre.IfNoneMatch {
		h.Set("If-None-Match", "*")
	}
	if pre.IfMatch != "" {
		h.Set("If-Match", pre.IfMatch)
	}
	resp, err := c.do(ctx, http.MethodPut, c.url(false), body, h)
	if err != nil {
		return nil, err
	}
	defer drain(resp)
	switch resp.StatusCode {
	case http.StatusOK, http.StatusCreated:
	case http.StatusForbidden, http.StatusMethodNotAllowed, http.StatusNoContent:
		return c.adopt(ctx, resp.StatusCode)
	default:
		e, _ := c.failure("PUT", resp)
		return nil, e
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("PUT %s: %w", c.Describe(), err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return c.adopt(ctx, resp.StatusCode)
	}
	return c.decode("PUT", bytes.NewReader(data))
}

// adopt reads the Machine the endpoint's controller made, after a PUT
// it answered with status.
func (c *InCluster) adopt(ctx context.Context, status int) (*Machine, error) {
	m, err := c.Get(ctx)
	switch {
	case err != nil:
		return nil, fmt.Errorf("PUT %s answered %d; reading the Machine its controller made: %w", c.Describe(), status, err)
	case m == nil:
		return nil, fmt.Errorf("PUT %s answered %d and there is no Machine: the endpoint neither takes the node's Machine nor has one for it", c.Describe(), status)
	}
	return m, nil
}

// PatchStatus writes the node's status on its Machine.
func (c *InCluster) PatchStatus(ctx context.Context, s Status) error {
	body, err := json.Marshal(map[string]any{"properties": map[string]any{"status": s}})
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodPatch, c.url(true), body, nil)
	if err != nil {
		return err
	}
	defer drain(resp)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e, _ := c.failure("PATCH status", resp)
		return e
	}
	return nil
}

func (c *InCluster) do(ctx context.Context, method, u string, body []byte, h http.Header) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, c.Describe(), err)
	}
	return resp, nil
}

func (c *InCluster) decode(op string, r io.Reader) (*Machine, error) {
	var m Machine
	if err := json.NewDecoder(io.LimitReader(r, maxBody)).Decode(&m); err != nil {
		return nil, fmt.Errorf("%s %s: the answer is not a Machine: %w", op, c.Describe(), err)
	}
	return &m, nil
}

// failure reads an answer that is not a success: a Kubernetes Status
// (from the API server: its reason is the code) or ARM's error envelope
// (from the endpoint). kube says the API server answered it itself.
func (c *InCluster) failure(op string, resp *http.Response) (e *Error, kube bool) {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e = &Error{Op: op, ResourceID: c.Describe(), Status: resp.StatusCode}
	var st struct {
		Kind, Reason, Message string
	}
	if json.Unmarshal(data, &st) == nil && st.Kind == "Status" {
		e.Code, e.Message = st.Reason, st.Message
		return e, true
	}
	_, d := readEnvelope(bytes.NewReader(data))
	e.Code, e.Message = d.Code, d.Message
	return e, false
}

var (
	_ Backend      = (*InCluster)(nil)
	_ StatusWriter = (*InCluster)(nil)
)

// DescribeFromConfig names the Machine config c registers: its ARM
// resource ID, or in in-cluster mode its path through the cluster
// connection. ok is false when c has no Machine.
func DescribeFromConfig(c *config.Config) (desc string, ok bool, err error) {
	if !c.Agent.MachineClient.InCluster() {
		id, ok, err := IDFromConfig(c)
		if err != nil && ok {
			return c.Azure.TargetCluster.ResourceID, ok, err
		}
		return id.String(), ok, err
	}
	desc = path.Join(c.Agent.MachineClient.Endpoint(), "machines", c.Agent.NodeName)
	return desc, true, CheckMachineName(c.Agent.NodeName)
}

// InClusterAtStart is the in-cluster client start registers with,
// before the node has a credential of its own: the bootstrap token's
// (upstream's start does the same), with the config's server and CA.
// A config without a bootstrap token joins with an Azure identity,
// whose cluster credential the kubelet gets only when it joins: the
// agent registers then.
func InClusterAtStart(c *config.Config) (*InCluster, error) {
	if c.Azure.BootstrapToken == nil || c.Azure.BootstrapToken.Token == "" {
		return nil, fmt.Errorf("in-cluster mode registers at start with azure.bootstrapToken's credential, and the config has none; the agent registers the Machine once the node has joined")
	}
	server, err := config.ServerURL(c.Node.Kubelet.ClusterFQDN)
	if err != nil {
		return nil, fmt.Errorf("node.kubelet.clusterFQDN: %w", err)
	}
	hc, err := kubeclient.HTTPClient(&rest.Config{Host: server, BearerToken: c.Azure.BootstrapToken.Token, TLSClientConfig: rest.TLSClientConfig{CAData: c.CAPEM()}}, kubeclient.Step)
	if err != nil {
		return nil, err
	}
	return NewInCluster(InClusterOptions{Server: server, HTTPClient: hc, Endpoint: c.Agent.MachineClient.Endpoint(), Name: c.Agent.NodeName})
}
