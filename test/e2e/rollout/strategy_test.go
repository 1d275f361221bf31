package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/Azure/aks-flex-node/internal/cli"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// TestRolloutCRDStrategyExtras: the API server, given the generated CRD,
// defaults issue 30's fields (mode Rollout, a window's zone UTC), refuses
// what Validate refuses with the field named (the CEL rules included),
// and keeps spec.rollback once set.
func TestRolloutCRDStrategyExtras(t *testing.T) {
	requireE2E(t)
	ctx := context.Background()
	rollout := func(name, strategy, extra string) []byte {
		return []byte(`{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeRollout","metadata":{"name":"` + name +
			`"},"spec":{"nodeSelector":{"matchLabels":{"pool":"x30"}},"release":{"kubernetesVersion":"v1.35.4"},"strategy":` + strategy + extra + `}}`)
	}
	valid := `{"canary":"10%","onFailure":"Rollback","requireAll":true,"windows":[{"days":["Sat","Sun"],"start":"22:00","end":"04:00"}]}`
	if out, err := cp.Kubectl(ctx, rollout("x30-valid", valid, ""), "create", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err := cp.Kubectl(ctx, nil, "get", "fnr", "x30-valid", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.FlexNodeRollout
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	s := got.Spec.Strategy
	if s.Mode != v1alpha1.ModeRollout || s.Windows[0].TimeZone != "UTC" || s.OnFailure != v1alpha1.FailureRollback || s.Canary.String() != "10%" {
		t.Errorf("defaults and values: %+v", s)
	}
	if errs := v1alpha1.Validate(&got); len(errs) != 0 {
		t.Errorf("what the server accepted, Validate refuses: %v", errs)
	}
	for _, tc := range []struct{ name, strategy, extra, field string }{
		{"x30-canary-0", `{"canary":0}`, "", "spec.strategy.canary"},
		{"x30-canary-0pct", `{"canary":"0%"}`, "", "spec.strategy.canary"},
		{"x30-mode", `{"mode":"DryRun"}`, "", "spec.strategy.mode"},
		{"x30-day", `{"windows":[{"days":["Monday"],"start":"01:00","end":"02:00"}]}`, "", "spec.strategy.windows[0].days[0]"},
		{"x30-clock", `{"windows":[{"days":["Mon"],"start":"24:00","end":"02:00"}]}`, "", "spec.strategy.windows[0].start"},
		{"x30-empty-window", `{"windows":[{"days":["Mon"],"start":"02:00","end":"02:00"}]}`, "", "spec.strategy.windows[0]"},
		{"x30-zone", `{"windows":[{"days":["Mon"],"start":"01:00","end":"02:00","timeZone":"../etc/passwd"}]}`, "", "spec.strategy.windows[0].timeZone"},
		{"x30-too-many", `{"windows":[` + strings.TrimSuffix(strings.Repeat(`{"days":["Mon"],"start":"01:00","end":"02:00"},`, v1alpha1.MaxWindows+1), ",") + `]}`, "", "spec.strategy.windows"},
		{"x30-no-reason", `{}`, `,"rollback":{}`, "spec.rollback.reason"},
	} {
		out, err := cp.Kubectl(ctx, rollout(tc.name, tc.strategy, tc.extra), "create", "-f", "-")
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
		} else if !strings.Contains(string(out), tc.field) {
			t.Errorf("%s: refused without naming %s:\n%s", tc.name, tc.field, out)
		}
	}

	// spec.rollback, once set, stays: the transition rule.
	rs, err := fleet.NewRollouts(cp.AdminConfig, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Patch(ctx, "x30-valid", types.MergePatchType, []byte(`{"spec":{"rollback":{"reason":"pods crash"}}}`)); err != nil {
		t.Fatal(err)
	}
	_, err = rs.Patch(ctx, "x30-valid", types.MergePatchType, []byte(`{"spec":{"rollback":null}}`))
	if err == nil || !strings.Contains(err.Error(), "spec.rollback cannot be removed") {
		t.Errorf("removing spec.rollback: %v", err)
	}
}

// TestRolloutApplyAndRollbackPatch: fleet plan's server-side apply
// creates and then updates a rollout (a new generation), and fleet
// rollback's merge patch is a compare-and-swap on the resourceVersion.
func TestRolloutApplyAndRollbackPatch(t *testing.T) {
	requireE2E(t)
	ctx := context.Background()
	rs, err := fleet.NewRollouts(cp.AdminConfig, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := intstr.FromInt32(1)
	ro := &v1alpha1.FlexNodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "x30-plan"}, Spec: v1alpha1.RolloutSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "x30"}},
		Release:      v1alpha1.Release{KubernetesVersion: "v1.35.4"},
	}}
	ro.Spec.Strategy.Mode, ro.Spec.Strategy.Canary = v1alpha1.ModePlan, &c
	first, err := rs.Apply(ctx, ro, "aks-flex-node-fleet-plan", true)
	if err != nil {
		t.Fatal(err)
	}
	if first.Spec.Strategy.Mode != v1alpha1.ModePlan || first.Generation != 1 || first.Spec.Strategy.MaxUnavailable.IntValue() != 1 {
		t.Fatalf("applied: generation %d, %+v", first.Generation, first.Spec.Strategy)
	}
	ro.Spec.Release.KubernetesVersion = "v1.35.5"
	second, err := rs.Apply(ctx, ro, "aks-flex-node-fleet-plan", true)
	if err != nil || second.Generation != 2 || second.Spec.Release.KubernetesVersion != "v1.35.5" {
		t.Fatalf("re-applied: %v, generation %d", err, second.Generation)
	}
	stale := `{"metadata":{"resourceVersion":"` + first.ResourceVersion + `"},"spec":{"rollback":{"reason":"late"}}}`
	if _, err := rs.Patch(ctx, "x30-plan", types.MergePatchType, []byte(stale)); !apierrors.IsConflict(err) {
		t.Errorf("a rollback on a stale resourceVersion: %v, want a conflict", err)
	}
	fresh := `{"metadata":{"resourceVersion":"` + second.ResourceVersion + `"},"spec":{"rollback":{"reason":"pods crash","requestedBy":"fleet rollback"}}}`
	rb, err := rs.Patch(ctx, "x30-plan", types.MergePatchType, []byte(fresh))
	if err != nil || rb.Spec.Rollback == nil || rb.Spec.Rollback.Reason != "pods crash" || rb.Generation != 3 {
		t.Fatalf("rollback: %v, %+v", err, rb.Spec.Rollback)
	}
}

// TestFleetPlanAndRollbackCommands runs `fleet plan` and `fleet rollback`
// as an admin would, against the real API server.
func TestFleetPlanAndRollbackCommands(t *testing.T) {
	requireE2E(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "rollout.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: flexnode.azure.com/v1alpha1
kind: FlexNodeRollout
metadata: {name: x30-cli}
spec:
  nodeSelector: {matchLabels: {pool: x30-cli}}
  release: {kubernetesVersion: v1.35.4}
  strategy: {mode: Rollout, canary: 1}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, int) {
		var out bytes.Buffer
		code := cli.Main(append(args, "--kubeconfig", cp.AdminKubeconfig), &out, &out)
		return out.String(), code
	}
	if out, code := run("fleet", "plan", "-f", file); code != 0 || !strings.Contains(out, "rollout x30-cli applied in mode Plan") {
		t.Fatalf("fleet plan: exit %d\n%s", code, out)
	}
	rs := rolloutsAdmin(t)
	ro, err := rs.Get(ctx, "x30-cli")
	if err != nil || ro.Spec.Strategy.Mode != v1alpha1.ModePlan || ro.Spec.Strategy.Canary.IntValue() != 1 {
		t.Fatalf("after fleet plan: %v, %+v", err, ro.Spec.Strategy)
	}
	if out, code := run("fleet", "rollback", "x30-cli", "--reason", "e2e: bad release"); code != 0 || !strings.Contains(out, "rolling back") {
		t.Fatalf("fleet rollback: exit %d\n%s", code, out)
	}
	ro, err = rs.Get(ctx, "x30-cli")
	if err != nil || ro.Spec.Rollback == nil || ro.Spec.Rollback.Reason != "e2e: bad release" || ro.Spec.Rollback.RequestedAt == nil {
		t.Fatalf("after fleet rollback: %v, %+v", err, ro.Spec.Rollback)
	}
	if out, code := run("fleet", "rollback", "x30-cli", "--reason", "again"); code != 0 || !strings.Contains(out, "already rolling back") || !strings.Contains(out, "e2e: bad release") {
		t.Errorf("second fleet rollback: exit %d\n%s", code, out)
	}
	if out, code := run("fleet", "rollback", "x30-none", "--reason", "x"); code == 0 || !strings.Contains(out, "no rollout x30-none") {
		t.Errorf("rollback of a missing rollout: exit %d\n%s", code, out)
	}
}
