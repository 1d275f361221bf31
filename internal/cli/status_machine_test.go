package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// status says that the agent retries a registration that failed, and
// shows the goal the agent follows: its decision, the applied eTag and
// version, and the last error (in text and json).
func TestStatusShowsTheMachineGoalAndTheRetry(t *testing.T) {
	root := t.TempDir()
	stateDir := filepath.Join(root, "var/lib/aks-flex-node")
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	const id = "/subscriptions/6f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b/resourceGroups/rg/providers/Microsoft.ContainerService/managedClusters/c1/agentPools/aksflexnodes/machines/edge-01"
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(stateDir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("machine-registration.json", `{"resourceId":"`+id+`","error":"PUT: 403 AuthorizationFailed","code":"AuthorizationFailed","at":"2026-12-06T04:00:00Z"}`)
	out, _, _ := run(t, "status", "--root", root)
	if !strings.Contains(out, "NOT registered: PUT: 403 AuthorizationFailed (the agent retries at each agent.machineReconcileInterval)\n") || strings.Contains(out, "goal:") {
		t.Errorf("status with a failed registration:\n%s", out)
	}
	write("machine-registration.json", `{"resourceId":"`+id+`","outcome":"created","eTag":"e1","kubernetesVersion":"1.35.0","at":"2026-12-06T04:00:00Z"}`)
	write("machine-goal.json", `{"applied":{"kubernetesVersion":"1.35.0"},"eTag":"e2","decision":"hold","reason":"ARM: GET: 503","error":"follow-machine: GET: 503 ServiceUnavailable","at":"2026-12-06T04:05:00Z"}`)
	out, _, _ = run(t, "status", "--root", root)
	want := "goal:       goal hold (applied eTag e2, Kubernetes 1.35.0) at 2026-12-06T04:05:00Z: ARM: GET: 503; last error: follow-machine: GET: 503 ServiceUnavailable\n"
	if !strings.Contains(out, want) || strings.Contains(out, "retries") {
		t.Errorf("status with a goal record:\n%s\nwant %q", out, want)
	}
	out, _, _ = run(t, "status", "--root", root, "-o", "json")
	if !strings.Contains(out, `"aksMachineGoal"`) || !strings.Contains(out, `"decision": "hold"`) {
		t.Errorf("status -o json:\n%s", out)
	}
}
