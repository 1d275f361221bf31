package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/state"
)

// status says what a node in networking.mode cluster waits for until the
// cluster's CNI has written its config into the active machine, and
// names that config once it has.
func TestStatusSaysTheNodeWaitsForTheClusterCNI(t *testing.T) {
	root := t.TempDir()
	data, err := os.ReadFile(aclExample)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	net, _ := cfg["networking"].(map[string]any)
	if net == nil {
		net = map[string]any{}
	}
	net["mode"] = "cluster"
	cfg["networking"] = net
	data, _ = json.Marshal(cfg)
	for p, d := range map[string][]byte{"etc/aks-flex-node/config.json": data} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), d, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, _, _ := run(t, "status", "--root", root)
	if !strings.Contains(out, "network:    cluster mode\n") {
		t.Errorf("status before a join:\n%s", out)
	}
	stateDir := filepath.Join(root, "var/lib/aks-flex-node")
	if _, err := state.OpenDir(stateDir).SaveApplied(state.Applied{Machine: "kube1", KubernetesVersion: "1.35.4"}); err != nil {
		t.Fatal(err)
	}
	netd := filepath.Join(root, "var/lib/machines/kube1/etc/cni/net.d")
	if err := os.MkdirAll(netd, 0o755); err != nil {
		t.Fatal(err)
	}
	out, _, _ = run(t, "status", "--root", root)
	if !strings.Contains(out, "network:    cluster mode: waits for the cluster's CNI: no network config in /etc/cni/net.d in machine kube1 yet") {
		t.Errorf("status without the cluster's CNI config:\n%s", out)
	}
	if err := os.WriteFile(filepath.Join(netd, "10-cluster.conflist"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, _ = run(t, "status", "--root", root)
	if !strings.Contains(out, "network:    cluster mode: the cluster's CNI config /etc/cni/net.d/10-cluster.conflist in machine kube1\n") {
		t.Errorf("status with the cluster's CNI config:\n%s", out)
	}
	out, _, _ = run(t, "status", "--root", root, "--output", "json")
	var got struct {
		Network nodeNetwork `json:"network"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Network != (nodeNetwork{Mode: "cluster", Machine: "kube1", CNIConfig: "/etc/cni/net.d/10-cluster.conflist"}) {
		t.Errorf("status json: %v %+v\n%s", err, got.Network, out)
	}
}

// status says whether the node is registered as its AKS Machine, from
// what start recorded, and says there is none without a target cluster.
func TestStatusSaysWhetherTheAKSMachineIsRegistered(t *testing.T) {
	root := t.TempDir()
	out, _, _ := run(t, "status", "--root", root)
	if !strings.Contains(out, "machine:    no AKS Machine (azure.targetCluster.resourceId is not set)\n") {
		t.Errorf("status without a record:\n%s", out)
	}
	stateDir := filepath.Join(root, "var/lib/aks-flex-node")
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	const id = "/subscriptions/6f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b/resourceGroups/rg/providers/Microsoft.ContainerService/managedClusters/c1/agentPools/aksflexnodes/machines/edge-01"
	rec := `{"resourceId":"` + id + `","error":"GET ` + id + `: 403 Forbidden: AuthorizationFailed: no role","code":"AuthorizationFailed","at":"2026-12-06T04:00:00Z"}`
	if err := os.WriteFile(filepath.Join(stateDir, "machine-registration.json"), []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, _ = run(t, "status", "--root", root)
	if !strings.Contains(out, "machine:    AKS Machine "+id+" NOT registered: GET "+id+": 403 Forbidden: AuthorizationFailed") {
		t.Errorf("status after an optional registration failed:\n%s", out)
	}
	out, _, _ = run(t, "status", "--root", root, "-o", "json")
	if !strings.Contains(out, `"code": "AuthorizationFailed"`) {
		t.Errorf("status -o json:\n%s", out)
	}
}
