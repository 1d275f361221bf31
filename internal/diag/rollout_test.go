package diag

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/preflight"
)

// The rollout check: no record is OK; an unreadable record, a failed
// node, a machine off the release the record names, and a node whose
// config also names an AKS Machine warn with what to do; a node on its
// release is OK naming it.
func TestDebugReportsTheRollout(t *testing.T) {
	f := newFakeNode(t)
	l := f.env.Layout
	write := func(data string) {
		t.Helper()
		if err := os.WriteFile(l.OnRoot(l.RolloutRecord()), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	check := func() preflight.CheckResult {
		t.Helper()
		return results(Run(context.Background(), f.env))[NameRollout]
	}
	if c := check(); c.Severity != preflight.SeverityOK || c.Message != "no rollout selected this node" {
		t.Errorf("no record: %+v", c)
	}
	write(`{"rollout":`)
	if c := check(); c.Severity != preflight.SeverityWarning || !strings.Contains(c.Message, "cannot be read") || !strings.Contains(c.Remedy, "start refuses until then") {
		t.Errorf("unreadable record: %+v", c)
	}
	// fakeNode's machine runs Kubernetes 1.35.4.
	applied := `"applied":{"rollout":"r1","generation":2,"release":{"kubernetesVersion":"v1.35.4"},"at":"2026-12-06T06:58:00Z"}`
	write(`{"rollout":"r1","generation":3,"phase":"Failed","step":"soak","reason":"KubeletRestarts","since":"2026-12-06T07:00:00Z","slot":"r1-slot-0",` + applied + `}`)
	if c := check(); c.Severity != preflight.SeverityWarning || !strings.Contains(c.Message, "Failed at step soak") || !strings.Contains(c.Message, "keeps its slot") ||
		!strings.Contains(c.Remedy, "aks-flex-node fleet resume r1") {
		t.Errorf("failed node: %+v", c)
	}
	write(`{"rollout":"r1","generation":2,"phase":"Updated","since":"2026-12-06T07:00:00Z","applied":{"rollout":"r1","generation":2,"release":{"kubernetesVersion":"v1.35.5"}}}`)
	if c := check(); c.Severity != preflight.SeverityWarning || !strings.Contains(c.Message, "machine kube1 runs Kubernetes 1.35.4, the release v1.35.5") {
		t.Errorf("machine off its release: %+v", c)
	}
	write(`{"rollout":"r1","generation":2,"phase":"Updated","since":"2026-12-06T07:00:00Z",` + applied + `}`)
	if c := check(); c.Severity != preflight.SeverityOK || !strings.HasSuffix(c.Message, "runs the release of rollout r1 generation 2") {
		t.Errorf("node on its release: %+v", c)
	}
	f.env.Config.Azure.TargetCluster = &config.TargetCluster{ResourceID: "/subscriptions/s/resourceGroups/rg/providers/Microsoft.ContainerService/managedClusters/c"}
	f.env.Config.Agent.NodeName = testNode
	if c := check(); c.Severity != preflight.SeverityWarning || !strings.Contains(c.Message, "two cluster goals") || !strings.Contains(c.Remedy, "remove azure.targetCluster.resourceId") {
		t.Errorf("two goals: %+v", c)
	}
}
