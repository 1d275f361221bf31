package v1alpha1

import (
	"testing"
	// The tests' zone database, so they do not depend on the build
	// machine's: the binary itself reads the host's (LoadTimeZone).
	_ "time/tzdata"

	"sigs.k8s.io/yaml"
)

// TestCRDSchemaStrategyExtras checks the generated schema of issue 30's
// fields: the markers in types_strategy.go made it to the CRD.
func TestCRDSchemaStrategyExtras(t *testing.T) {
	var crd map[string]any
	if err := yaml.Unmarshal(CRD, &crd); err != nil {
		t.Fatal(err)
	}
	get := func(v any, path ...string) any {
		for _, k := range path {
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		}
		return v
	}
	ver := get(crd, "spec").(map[string]any)["versions"].([]any)[0]
	spec := get(ver, "schema", "openAPIV3Schema", "properties", "spec")
	strategy := get(spec, "properties", "strategy", "properties")
	if d := get(strategy, "mode", "default"); d != "Rollout" {
		t.Errorf("mode default = %v, want Rollout", d)
	}
	if e, _ := get(strategy, "onFailure", "enum").([]any); len(e) != 2 || e[1] != "Rollback" {
		t.Errorf("onFailure enum = %v, want Pause, Rollback", e)
	}
	if get(strategy, "canary", "x-kubernetes-validations") == nil {
		t.Error("canary has no CEL rule")
	}
	if m := get(strategy, "windows", "maxItems"); m != float64(MaxWindows) {
		t.Errorf("windows maxItems = %v, want %d", m, MaxWindows)
	}
	w := get(strategy, "windows", "items")
	if get(w, "x-kubernetes-validations") == nil || get(w, "properties", "start", "pattern") != clockRE().String() ||
		get(w, "properties", "timeZone", "pattern") != timeZoneRE().String() {
		t.Errorf("window schema lacks its rule or Validate's patterns: %v", w)
	}
	if get(spec, "x-kubernetes-validations") == nil {
		t.Error("spec has no rule keeping spec.rollback once set")
	}
	status := get(ver, "schema", "openAPIV3Schema", "properties", "status", "properties")
	for _, f := range []string{"held", "heldNodes", "plan", "rollback", "window"} {
		if get(status, f) == nil {
			t.Errorf("status lacks %s", f)
		}
	}
}
