package diag

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/preflight"
)

// The aks-machine check: a failed registration warns with its code and
// says the agent retries; a goal that holds on an ARM error warns with
// it; a registered Machine whose goal is applied is OK with both.
func TestDebugReportsTheAKSMachine(t *testing.T) {
	f := newFakeNode(t)
	l := f.env.Layout
	write := func(p, data string) {
		t.Helper()
		if err := os.WriteFile(l.OnRoot(p), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const id = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.ContainerService/managedClusters/c/agentPools/p/machines/node-1"
	check := func() preflight.CheckResult {
		t.Helper()
		return results(Run(context.Background(), f.env))[NameAKSMachine]
	}
	write(l.MachineRegistration(), `{"resourceId":"`+id+`","error":"PUT: 403 AuthorizationFailed","code":"AuthorizationFailed","at":"2026-12-06T04:00:00Z"}`)
	if c := check(); c.Severity != preflight.SeverityWarning || !strings.Contains(c.Remedy, "AuthorizationFailed") || !strings.Contains(c.Remedy, "the agent retries") {
		t.Errorf("failed registration: %+v", c)
	}
	write(l.MachineRegistration(), `{"resourceId":"`+id+`","outcome":"created","eTag":"e1","kubernetesVersion":"1.35.0","at":"2026-12-06T04:00:00Z"}`)
	write(l.MachineGoal(), `{"applied":{"kubernetesVersion":"1.35.0"},"eTag":"e1","decision":"hold","reason":"ARM: 503","error":"GET: 503 ServiceUnavailable","at":"2026-12-06T04:05:00Z"}`)
	if c := check(); c.Severity != preflight.SeverityWarning || !strings.Contains(c.Message, "ServiceUnavailable") {
		t.Errorf("goal on hold: %+v", c)
	}
	write(l.MachineGoal(), `{"applied":{"kubernetesVersion":"1.35.0"},"eTag":"e2","decision":"applied","reason":"the goal is applied","at":"2026-12-06T04:06:00Z"}`)
	if c := check(); c.Severity != preflight.SeverityOK || !strings.Contains(c.Message, "created") || !strings.Contains(c.Message, "goal applied (applied eTag e2") {
		t.Errorf("goal applied: %+v", c)
	}
}
