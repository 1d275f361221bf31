package rollout

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestRolloutCRDValidatesAndDefaults: the generated CRD, applied as
// `cluster prepare --fleet` prints it, makes the API server default a
// rollout's strategy and refuse what Validate refuses, with the field
// named.
func TestRolloutCRDValidatesAndDefaults(t *testing.T) {
	requireE2E(t)
	ctx := context.Background()
	rollout := func(name, release, strategy string) []byte {
		return []byte(`{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeRollout","metadata":{"name":"` + name +
			`"},"spec":{"nodeSelector":{"matchLabels":{"pool":"edge"}},"release":` + release + `,"strategy":` + strategy + `}}`)
	}
	if _, err := cp.Kubectl(ctx, rollout("valid", `{"workerImage":"registry.example/worker:1.35@`+digest+`"}`, `{}`), "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	out, err := cp.Kubectl(ctx, nil, "get", "fnr", "valid", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Spec struct {
			Strategy map[string]any
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	s := got.Spec.Strategy
	if s["maxUnavailable"] != float64(1) || s["onFailure"] != "Pause" || s["soak"] != "5m" || s["drainTimeout"] != "15m" {
		t.Errorf("defaults: %v", s)
	}
	table, err := cp.Kubectl(ctx, nil, "get", "fnr")
	if err != nil || !strings.Contains(string(table), "SELECTED") || !strings.Contains(string(table), "UPDATED") {
		t.Errorf("printer columns: %v\n%s", err, table)
	}
	for _, tc := range []struct{ name, release, strategy, field string }{
		{"tag-only", `{"workerImage":"registry.example/worker:1.35"}`, `{}`, "spec.release.workerImage"},
		{"empty-release", `{}`, `{}`, "spec.release"},
		{"zero-slots", `{"kubernetesVersion":"v1.35.4"}`, `{"maxUnavailable":0}`, "spec.strategy.maxUnavailable"},
		{"zero-percent", `{"kubernetesVersion":"v1.35.4"}`, `{"maxUnavailable":"0%"}`, "spec.strategy.maxUnavailable"},
		{"negative-soak", `{"kubernetesVersion":"v1.35.4"}`, `{"soak":"-1s"}`, "spec.strategy.soak"},
		{"unknown-policy", `{"kubernetesVersion":"v1.35.4"}`, `{"onFailure":"Ignore"}`, "spec.strategy.onFailure"},
		{"agent-over-http", `{"agent":{"url":"http://x/a","sha256":"` + strings.Repeat("a", 64) + `"}}`, `{}`, "spec.release.agent.url"},
	} {
		out, err := cp.Kubectl(ctx, rollout(tc.name, tc.release, tc.strategy), "create", "-f", "-")
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
		} else if !strings.Contains(string(out), tc.field) {
			t.Errorf("%s: refused without naming %s:\n%s", tc.name, tc.field, out)
		}
	}
}
