package preflight

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// runStaging runs the staging-space check of RepaveChecks on h's env,
// with need as what the registry's manifests say is left to pull.
func runStaging(t *testing.T, h *fakeHost, need func(context.Context, string) (uint64, error)) Result {
	t.Helper()
	env := h.env()
	env.StagingNeed = need
	for _, c := range RepaveChecks(env) {
		if c.Name() == NameStagingSpace {
			r := c.Run(t.Context())
			t.Logf("%s: %s (remedy: %s)", r.Severity, r.Message, r.Remedy)
			return r
		}
	}
	t.Fatal("RepaveChecks has no staging-space check")
	return Result{}
}

func TestStagingSpace(t *testing.T) {
	h := newHost(t)
	asked := ""
	need := func(n uint64, err error) func(context.Context, string) (uint64, error) {
		return func(_ context.Context, ref string) (uint64, error) { asked = ref; return n, err }
	}
	h.set("bootstrap.offlineArtifacts.source", "/var/lib/aks-flex-node/bundles/k8s-{{ .KubernetesVersion }}")
	want(t, runStaging(t, h, need(1, nil)), SeverityOK, "nothing to pull")
	if asked != "" {
		t.Errorf("a local bundle's size asked of %q", asked)
	}
	h.set("bootstrap.offlineArtifacts.source", "oci://registry.example/bundles/k8s:{{ .KubernetesVersion }}")
	h.free = 100 << 20
	want(t, runStaging(t, h, need(80<<20, nil)), SeverityOK, "80.0 MiB to pull", "registry.example/bundles/k8s:1.35.0", "100.0 MiB free")
	if asked != "oci://registry.example/bundles/k8s:1.35.0" {
		t.Errorf("size asked of %q, want the expanded source", asked)
	}
	if h.frees[len(h.frees)-1] != filepath.Join(h.root, "var/lib") {
		t.Errorf("statfs asked about %v, want the bundles dir's nearest existing ancestor", h.frees)
	}
	// The margin: 90 MiB of bundle leaves less than 16 MiB of 100.
	want(t, runStaging(t, h, need(90<<20, nil)), SeverityError, "90.0 MiB to pull", "does not fit", "at least 106.0 MiB")
	want(t, runStaging(t, h, need(0, nil)), SeverityOK, "is staged")
	// The manifests' fetch failing is artifact-sources' error to name.
	want(t, runStaging(t, h, need(0, errors.New("fetch artifact manifest: 404"))), SeverityWarning, "size not known", "404", NameArtifactSources)
}
