package config

import (
	"errors"
	"strings"
	"testing"
)

const (
	testSub = "6f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b"
	testRID = "/subscriptions/" + testSub + "/resourceGroups/flex-rg/providers/Microsoft.ContainerService/managedClusters/flex-aks"
)

// withARM is base with an AKS Machine target and a managed identity for
// ARM next to the bootstrap token (upstream's recommended pair).
func withARM(t *testing.T) map[string]any {
	m := base(t)
	set(m, "azure.targetCluster.resourceId", testRID)
	set(m, "azure.managedIdentity", map[string]any{})
	return m
}

func TestTargetClusterKeysLoadAndDefault(t *testing.T) {
	m := withARM(t)
	set(m, "azure.subscriptionId", testSub)
	set(m, "azure.targetCluster.location", "eastus")
	set(m, "azure.resourceManagerEndpoint", "https://management.azure.com")
	set(m, "agent.requireMachineRegistration", true)
	c, err := parse(t, m)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Azure.ARM() || c.Azure.TargetAgentPoolName != DefaultTargetAgentPoolName || c.Azure.MachineAPIVersion != DefaultMachineAPIVersion {
		t.Errorf("ARM %v, pool %q, api-version %q", c.Azure.ARM(), c.Azure.TargetAgentPoolName, c.Azure.MachineAPIVersion)
	}
	// The kubelet joins with the token; the identity is ARM's.
	if c.Azure.Method() != MethodBootstrapToken || c.Azure.Identity() || c.Azure.IdentityMethod() != MethodManagedIdentity {
		t.Errorf("method %q identity %v ARM identity %q", c.Azure.Method(), c.Azure.Identity(), c.Azure.IdentityMethod())
	}
	if !c.Agent.RequireMachineRegistration {
		t.Error("agent.requireMachineRegistration lost")
	}
	// Without a target cluster nothing ARM is defaulted.
	c, err = parse(t, base(t))
	if err != nil || c.Azure.ARM() || c.Azure.TargetAgentPoolName != "" || c.Azure.MachineAPIVersion != "" {
		t.Errorf("no target: %v %+v", err, c.Azure)
	}
}

func TestParseClusterID(t *testing.T) {
	id, err := ParseClusterID(strings.ToLower(testRID))
	if err != nil || id.SubscriptionID != testSub || id.ResourceGroup != "flex-rg" || id.Name != "flex-aks" {
		t.Fatalf("%+v %v", id, err)
	}
	if id.String() != testRID {
		t.Errorf("String() = %s", id.String())
	}
	for _, bad := range []string{
		"", "flex-aks", testRID + "/", testRID + "/agentPools/p",
		strings.Replace(testRID, "managedClusters", "virtualMachines", 1),
		strings.Replace(testRID, "Microsoft.ContainerService", "Microsoft.Compute", 1),
		strings.Replace(testRID, testSub, "sub", 1),
		strings.Replace(testRID, "flex-aks", "-aks", 1),
		strings.Replace(testRID, "flex-rg", "rg.", 1),
	} {
		if _, err := ParseClusterID(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

// Each ARM key is refused at its JSON path when malformed, and the keys
// that only registration uses are refused without a target cluster.
func TestMachineKeysValidation(t *testing.T) {
	cases := []struct {
		name    string
		noARM   bool
		edits   map[string]any
		path    string // "" = valid
		contain string
	}{
		{"pair ok", false, nil, "", ""},
		{"sp only ok", false, map[string]any{"azure.bootstrapToken": nil, "azure.managedIdentity": nil, "azure.tenantId": testSub,
			"azure.servicePrincipal": map[string]any{"clientId": testSub, "clientSecret": "s"}}, "", ""},
		{"resource id", false, map[string]any{"azure.targetCluster.resourceId": "/subscriptions/x"}, "azure.targetCluster.resourceId", "not a managed cluster resource ID"},
		{"resource id provider", false, map[string]any{"azure.targetCluster.resourceId": strings.Replace(testRID, "ContainerService", "Compute", 1)}, "azure.targetCluster.resourceId", `want "Microsoft.ContainerService"`},
		{"subscription guid", false, map[string]any{"azure.subscriptionId": "abc"}, "azure.subscriptionId", "not a GUID"},
		{"subscription mismatch", false, map[string]any{"azure.subscriptionId": "00000000-0000-0000-0000-000000000009"}, "azure.subscriptionId", "is not the subscription of azure.targetCluster.resourceId"},
		{"location", false, map[string]any{"azure.targetCluster.location": "East US"}, "azure.targetCluster.location", "region"},
		{"pool", false, map[string]any{"azure.targetAgentPoolName": "Flex-Nodes"}, "azure.targetAgentPoolName", "1-12 lowercase"},
		{"pool long", false, map[string]any{"azure.targetAgentPoolName": "aksflexnodes1"}, "azure.targetAgentPoolName", "1-12 lowercase"},
		{"endpoint http", false, map[string]any{"azure.resourceManagerEndpoint": "http://management.azure.com"}, "azure.resourceManagerEndpoint", "https"},
		{"endpoint path", false, map[string]any{"azure.resourceManagerEndpoint": "https://arm.example.test/x"}, "azure.resourceManagerEndpoint", "no path"},
		{"endpoint slash ok", false, map[string]any{"azure.resourceManagerEndpoint": "https://arm.example.test:8443/"}, "", ""},
		{"api version", false, map[string]any{"azure.machineApiVersion": "2025-10-02-beta"}, "azure.machineApiVersion", "not an ARM api-version"},
		{"api version date", false, map[string]any{"azure.machineApiVersion": "2025-13-02"}, "azure.machineApiVersion", "not an ARM api-version"},
		{"api version ok", false, map[string]any{"azure.machineApiVersion": "2026-01-01"}, "", ""},
		{"token only ok", false, map[string]any{"azure.managedIdentity": nil}, "", ""},
		{"token only required", false, map[string]any{"azure.managedIdentity": nil, "agent.requireMachineRegistration": true}, "agent.requireMachineRegistration", "needs an Azure identity"},
		{"token and two identities", false, map[string]any{"azure.arc": map[string]any{"enabled": true}}, "azure", "exactly one authentication method"},
		{"pair without target", true, map[string]any{"azure.managedIdentity": map[string]any{}}, "azure", "set azure.targetCluster.resourceId, or keep one"},
		{"require without target", true, map[string]any{"agent.requireMachineRegistration": true}, "agent.requireMachineRegistration", "set azure.targetCluster.resourceId"},
		{"require false without target ok", true, map[string]any{"agent.requireMachineRegistration": false}, "", ""},
		{"pool without target", true, map[string]any{"azure.targetAgentPoolName": "flex"}, "azure.targetAgentPoolName", "applies only to AKS Machine registration"},
		{"location without target ok", true, map[string]any{"azure.targetCluster.location": "eastus"}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := withARM(t)
			if tc.noARM {
				m = base(t)
			}
			for p, v := range tc.edits {
				set(m, p, v)
			}
			_, err := parse(t, m)
			if tc.path == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
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
