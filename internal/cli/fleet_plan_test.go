package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

const planDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

const planYAML = `apiVersion: flexnode.azure.com/v1alpha1
kind: FlexNodeRollout
metadata:
  name: edge-b
spec:
  nodeSelector:
    matchLabels: {pool: edge}
  release:
    workerImage: registry.example/worker:1.35@` + planDigest + `
  strategy:
    mode: Rollout
    canary: 1
    maxUnavailable: 50%
    windows:
    - {days: [Sat, Sun], start: "22:00", end: "04:00", timeZone: Europe/Berlin}
`

func planFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rollout.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadPlan(t *testing.T) {
	ro, err := loadPlan(planFile(t, planYAML))
	if err != nil {
		t.Fatal(err)
	}
	if ro.Spec.Strategy.Mode != v1alpha1.ModePlan || ro.Name != "edge-b" || ro.Spec.Strategy.Canary.IntValue() != 1 || len(ro.Spec.Strategy.Windows) != 1 {
		t.Fatalf("loaded %+v", ro.Spec.Strategy)
	}
	for _, tc := range []struct{ name, content, want string }{
		{"unknown field", strings.Replace(planYAML, "canary: 1", "canaries: 1", 1), `unknown field "canaries"`},
		{"invalid", strings.Replace(planYAML, "@"+planDigest, "", 1), "spec.release.workerImage: Invalid value"},
		{"bad window", strings.Replace(planYAML, `end: "04:00"`, `end: "22:00"`, 1), "spec.strategy.windows[0].end"},
		{"two errors", strings.Replace(strings.Replace(planYAML, "canary: 1", "canary: 0", 1), "50%", "0%", 1), "spec.strategy.maxUnavailable"},
		{"wrong kind", strings.Replace(planYAML, "kind: FlexNodeRollout", "kind: Deployment", 1), `kind "Deployment"`},
		{"no name", strings.Replace(planYAML, "name: edge-b", "labels: {}", 1), "metadata.name: required"},
		{"not yaml", "{", "rollout.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadPlan(planFile(t, tc.content))
			if err == nil || ExitCode(err) != ExitInvalid || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v (exit %d), want exit 2 naming %q", err, ExitCode(err), tc.want)
			}
		})
	}
}

func TestFleetPlanCommandOffline(t *testing.T) {
	out, _, code := run(t, "fleet", "plan", "-f", planFile(t, planYAML), "--validate-only")
	if code != ExitOK || !strings.Contains(out, "rollout edge-b in") || !strings.Contains(out, "is valid (mode Plan)") {
		t.Fatalf("exit %d: %s", code, out)
	}
	if _, out, code := run(t, "fleet", "plan"); code != ExitInvalid || !strings.Contains(out, "-f:") {
		t.Fatalf("no -f: exit %d: %s", code, out)
	}
	// No kubeconfig anywhere: a usage error that says what to give.
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "absent"))
	t.Setenv("HOME", t.TempDir())
	_, out, code = run(t, "fleet", "plan", "-f", planFile(t, planYAML))
	if code != ExitInvalid || !strings.Contains(out, "--kubeconfig") {
		t.Fatalf("no kubeconfig: exit %d: %s", code, out)
	}
}

func TestFleetRollbackCommandOffline(t *testing.T) {
	for _, args := range [][]string{{"edge-b"}, {"edge-b", "--reason", strings.Repeat("x", 1025)}, {"--reason", "x"}, {"a", "b", "--reason", "x"}} {
		if _, out, code := run(t, append([]string{"fleet", "rollback"}, args...)...); code != ExitInvalid {
			t.Errorf("%q: exit %d, want 2: %s", args, code, out)
		}
	}
}

func TestRollbackPatch(t *testing.T) {
	at := time.Date(2026, 12, 6, 7, 30, 0, 0, time.FixedZone("CET", 3600))
	b, err := rollbackPatch("4711", `pods "crash"`, "fleet rollback on ops-1", at)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Metadata struct{ ResourceVersion string }
		Spec     struct{ Rollback v1alpha1.RollbackRequest }
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	rb := p.Spec.Rollback
	if p.Metadata.ResourceVersion != "4711" || rb.Reason != `pods "crash"` || rb.RequestedBy != "fleet rollback on ops-1" ||
		!rb.RequestedAt.Time.Equal(at) || !strings.Contains(string(b), `"2026-12-06T06:30:00Z"`) {
		t.Fatalf("patch %s", b)
	}
}
