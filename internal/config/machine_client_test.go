package config

import (
	"errors"
	"strings"
	"testing"
)

func TestMachineClientKeys(t *testing.T) {
	cases := []struct {
		name          string
		edits         map[string]any
		path, contain string
	}{
		{"in-cluster default endpoint", map[string]any{"agent.machineClient.mode": "in-cluster"}, "", ""},
		{"in-cluster required with a token", map[string]any{"agent.machineClient.mode": "in-cluster", "agent.requireMachineRegistration": true}, "", ""},
		{"in-cluster endpoint", map[string]any{"agent.machineClient": map[string]any{"mode": "in-cluster", "endpointUrl": "/api/v1/namespaces/kube-system/services/http:flex:80/proxy"}}, "", ""},
		{"in-cluster required without a token", map[string]any{"agent.machineClient.mode": "in-cluster", "agent.requireMachineRegistration": true, "azure.bootstrapToken": nil, "azure.managedIdentity": map[string]any{}}, "agent.requireMachineRegistration", "azure.bootstrapToken's credential"},
		{"arm explicit", map[string]any{"agent.machineClient.mode": "arm"}, "", ""},
		{"e2e", map[string]any{"agent.machineClient.mode": "e2e"}, "agent.machineClient.mode", "local file"},
		{"unknown mode", map[string]any{"agent.machineClient.mode": "grpc"}, "agent.machineClient.mode", "not a machine client mode"},
		{"url with host", map[string]any{"agent.machineClient": map[string]any{"mode": "in-cluster", "endpointUrl": "https://proxy.example.test/machines"}}, "agent.machineClient.endpointUrl", "without scheme or host"},
		{"relative path", map[string]any{"agent.machineClient": map[string]any{"mode": "in-cluster", "endpointUrl": "api/v1/x"}}, "agent.machineClient.endpointUrl", "absolute path"},
		{"dot segments", map[string]any{"agent.machineClient": map[string]any{"mode": "in-cluster", "endpointUrl": "/api/v1/../x"}}, "agent.machineClient.endpointUrl", "clean path"},
		{"query", map[string]any{"agent.machineClient": map[string]any{"mode": "in-cluster", "endpointUrl": "/api/v1/x?y=1"}}, "agent.machineClient.endpointUrl", "without query"},
		{"endpoint in arm mode", map[string]any{"agent.machineClient.endpointUrl": "https://proxy.example.test"}, "agent.machineClient.endpointUrl", "applies only to mode"},
		{"in-cluster with a target cluster, as upstream writes it", map[string]any{"agent.machineClient.mode": "in-cluster", "azure.targetCluster.resourceId": testRID}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := base(t)
			for p, v := range tc.edits {
				set(m, p, v)
			}
			c, err := parse(t, m)
			if tc.path == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				if c.Agent.MachineClient.InCluster() != (c.Agent.MachineClient.Mode == MachineClientInCluster) || !c.HasMachine() && c.Agent.MachineClient.InCluster() {
					t.Errorf("machine client %+v", c.Agent.MachineClient)
				}
				return
			}
			var ie *InvalidError
			var ve ValidationErrors
			if !errors.As(err, &ve) && !(errors.As(err, &ie) && errors.As(ie.Err, &ve)) {
				t.Fatalf("want ValidationErrors, got %v", err)
			}
			for _, e := range ve {
				if e.Path == tc.path && strings.Contains(e.Msg, tc.contain) {
					return
				}
			}
			t.Fatalf("no error at %s containing %q; got:\n%v", tc.path, tc.contain, ve)
		})
	}
}

func TestInClusterEndpointDefault(t *testing.T) {
	var m *MachineClient
	if m.InCluster() || m.Endpoint() != DefaultInClusterEndpointURL {
		t.Errorf("nil: %v %s", m.InCluster(), m.Endpoint())
	}
	m = &MachineClient{Mode: MachineClientInCluster, EndpointURL: "/api/v1/x"}
	if !m.InCluster() || m.Endpoint() != "/api/v1/x" {
		t.Errorf("%+v: %v %s", m, m.InCluster(), m.Endpoint())
	}
}
