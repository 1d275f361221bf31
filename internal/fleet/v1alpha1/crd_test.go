package v1alpha1

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestCRDMatchesTypes regenerates the CRD and the deep copies from the
// types with the pinned controller-gen and fails when the committed files
// differ: the schema is never edited by hand. Fix with `make crds`.
func TestCRDMatchesTypes(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command("go", "run", ControllerGen, "object", "crd", "paths=.",
		"output:crd:dir="+filepath.Join(out, "crd"), "output:object:dir="+filepath.Join(out, "obj"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, b)
	}
	for gen, committed := range map[string]string{
		filepath.Join(out, "crd", "flexnode.azure.com_flexnoderollouts.yaml"): filepath.Join("crd", "flexnode.azure.com_flexnoderollouts.yaml"),
		filepath.Join(out, "crd", "flexnode.azure.com_flexnodeslots.yaml"):    filepath.Join("crd", "flexnode.azure.com_flexnodeslots.yaml"),
		filepath.Join(out, "obj", "zz_generated.deepcopy.go"):                 "zz_generated.deepcopy.go",
	} {
		want, err := os.ReadFile(gen)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(committed)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what controller-gen makes of types.go: run `make crds` and commit", committed)
		}
	}
	if !bytes.Equal(CRD, mustRead(t, filepath.Join("crd", "flexnode.azure.com_flexnoderollouts.yaml"))) ||
		!bytes.Equal(SlotCRD, mustRead(t, filepath.Join("crd", "flexnode.azure.com_flexnodeslots.yaml"))) {
		t.Error("an embedded CRD is not its file")
	}
	entries, err := os.ReadDir(filepath.Join(out, "crd"))
	if err != nil || len(entries) != 2 {
		t.Errorf("controller-gen made %d CRDs (%v), and this package embeds 2", len(entries), err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCRDSchema checks the facts of the generated schema that the issue
// asks for, so a marker lost in an edit of types.go fails here and not in
// an operator's cluster.
func TestCRDSchema(t *testing.T) {
	var crd map[string]any
	if err := yaml.Unmarshal(CRD, &crd); err != nil {
		t.Fatal(err)
	}
	get := func(v any, path ...any) any {
		for _, k := range path {
			switch k := k.(type) {
			case string:
				v = v.(map[string]any)[k]
			case int:
				v = v.([]any)[k]
			}
		}
		return v
	}
	spec := get(crd, "spec")
	if get(spec, "scope") != "Cluster" || get(spec, "names", "shortNames", 0) != "fnr" || get(spec, "group") != Group {
		t.Errorf("scope/shortName/group: %v", get(spec, "names"))
	}
	ver := get(spec, "versions", 0)
	if get(ver, "name") != Version || get(ver, "subresources", "status") == nil {
		t.Errorf("version %v lacks the status subresource", get(ver, "name"))
	}
	var cols []string
	for _, c := range get(ver, "additionalPrinterColumns").([]any) {
		cols = append(cols, get(c, "name").(string))
	}
	for _, want := range []string{"Selected", "Staged", "Updating", "Updated", "Failed"} {
		if !contains(cols, want) {
			t.Errorf("printer columns %v lack %s", cols, want)
		}
	}
	strategy := get(ver, "schema", "openAPIV3Schema", "properties", "spec", "properties", "strategy", "properties")
	if d := get(strategy, "maxUnavailable", "default"); d != float64(1) {
		t.Errorf("maxUnavailable default = %v, want 1", d)
	}
	if d := get(strategy, "onFailure", "default"); d != "Pause" {
		t.Errorf("onFailure default = %v, want Pause", d)
	}
	if get(strategy, "maxUnavailable", "x-kubernetes-validations") == nil {
		t.Error("maxUnavailable has no CEL rule")
	}
	img := get(ver, "schema", "openAPIV3Schema", "properties", "spec", "properties", "release", "properties", "workerImage", "pattern")
	if img != workerImageRE().String() {
		t.Errorf("workerImage pattern %v is not Validate's %s", img, workerImageRE())
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
