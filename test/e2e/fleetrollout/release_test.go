package fleetrollout

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

// The Kubernetes versions: the hosts join at joined (the 1.34 kubelet
// build-k8s.sh --module cmd-1.34 makes), release B moves them to the
// control plane's version.
const (
	joined  = "1.34.2"
	version = "1.35.4"
)

// releases is what the test publishes: the worker images (each another
// digest of the same layers) and the bundles, in the site registry.
type releases struct {
	reg *siteRegistry
	// workers maps a worker image name (a, b, c...) to its digest-pinned
	// reference as the hosts name it.
	workers map[string]string
	// bundles maps a tag to the bundle's source as the hosts name it.
	bundles map[string]string
	// manifest is release A's bundle manifest: the containerd, runc and
	// CNI versions the configs name (the same in every bundle).
	manifest fixtures.Manifest
}

// workerImage is the fixture worker image from its OCI layout.
func workerImage(t *testing.T, layoutDir string) v1.Image {
	t.Helper()
	p, err := layout.FromPath(layoutDir)
	must(t, err)
	idx, err := p.ImageIndex()
	must(t, err)
	im, err := idx.IndexManifest()
	must(t, err)
	for _, d := range im.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] == fixtures.WorkerTag {
			img, err := idx.Image(d.Digest)
			must(t, err)
			return img
		}
	}
	t.Fatalf("no image tagged %s in %s", fixtures.WorkerTag, layoutDir)
	return nil
}

// pushWorker publishes img with the label aks-flex-node.e2e/release=rel
// (the same layers, another digest: the layer cache makes its rootfs at
// once) as workerRepo:rel, and records its digest-pinned reference.
func (r *releases) pushWorker(t *testing.T, img v1.Image, rel string) string {
	t.Helper()
	cf, err := img.ConfigFile()
	must(t, err)
	cfg := cf.Config
	cfg.Labels = map[string]string{"aks-flex-node.e2e/release": rel}
	for k, v := range cf.Config.Labels {
		cfg.Labels[k] = v
	}
	img, err = mutate.Config(img, cfg)
	must(t, err)
	tag, err := name.NewTag(r.reg.Outer+"/"+workerRepo+":"+rel, name.Insecure)
	must(t, err)
	must(t, remote.Write(tag, img))
	d, err := img.Digest()
	must(t, err)
	ref := r.reg.Inner() + "/" + workerRepo + "@" + d.String()
	r.workers[rel] = ref
	return ref
}

// pushBundle rebuilds a fixture bundle with the product's CLI (`artifacts
// build --from-dir`: the fixture is laid out like upstream's tree) and
// publishes it with `artifacts push` as repo:tag; it returns the source
// the hosts name it by.
func (r *releases) pushBundle(t *testing.T, agent, fixtureBundle string, m fixtures.Manifest, repo, tag string) string {
	t.Helper()
	work := t.TempDir()
	spec, err := json.MarshalIndent(fixtures.BuildSpec(m), "", "  ")
	must(t, err)
	specPath := filepath.Join(work, "bundle-spec.json")
	must(t, os.WriteFile(specPath, spec, 0o644))
	out := filepath.Join(work, "bundle")
	run(t, agent, "artifacts", "build", "--manifest", specPath, "--from-dir", fixtureBundle, "--output-dir", out)
	run(t, agent, "artifacts", "push", "--dir", out, "oci://"+r.reg.Outer+"/"+repo+":"+tag)
	// The built bundle is in the registry now; its copy on disk is not
	// needed again.
	_ = os.RemoveAll(out)
	src := "oci://" + r.reg.Inner() + "/" + bundleRepo + ":" + tag
	r.bundles[tag] = src
	return src
}

// publish makes the releases: worker images a, b and c, the joined
// version's bundle (release A), the control plane's (B and C) and, in
// badRepo under C's tag, a bundle whose kubelet exits at start.
func publish(ctx context.Context, t *testing.T, reg *siteRegistry, agent string) *releases {
	t.Helper()
	r := &releases{reg: reg, workers: map[string]string{}, bundles: map[string]string{}}
	binDir, err := controlplane.FindBinDir("kubelet", "kubectl")
	must(t, err)
	layoutDir, _, err := fixtures.WorkerImage(ctx, t.Logf)
	must(t, err)
	img := workerImage(t, layoutDir)
	for _, rel := range []string{"a", "b", "c", "d"} {
		r.pushWorker(t, img, rel)
	}
	first, firstM, err := fixtures.Bundle(ctx, t.Logf, fixtures.BundleOptions{KubeletPath: previousKubelet(t), KubectlPath: binDir + "/kubectl", KubernetesVersion: joined})
	must(t, err)
	r.manifest = firstM
	r.pushBundle(t, agent, first, firstM, bundleRepo, "k8s-"+joined)
	next, nextM, err := fixtures.Bundle(ctx, t.Logf, fixtures.BundleOptions{KubeletPath: binDir + "/kubelet", KubectlPath: binDir + "/kubectl", KubernetesVersion: version})
	must(t, err)
	for _, tag := range []string{"k8s-" + version + "-b", "k8s-" + version + "-c", "k8s-" + version + "-d"} {
		r.pushBundle(t, agent, next, nextM, bundleRepo, tag)
	}
	bad, badM, err := fixtures.Bundle(ctx, t.Logf, fixtures.BundleOptions{KubeletPath: failingKubelet(t), KubectlPath: binDir + "/kubectl", KubernetesVersion: version})
	must(t, err)
	r.pushBundle(t, agent, bad, badM, badRepo, "k8s-"+version+"-c")
	return r
}

// release is one rollout's release: a worker image and its bundle (at
// the control plane's version).
func (r *releases) release(rel string) v1alpha1.Release {
	return v1alpha1.Release{KubernetesVersion: "v" + version, Artifacts: r.bundles["k8s-"+version+"-"+rel], WorkerImage: r.workers[rel]}
}

// failingKubelet is a kubelet that exits at start: the bundle's checks
// pass (its manifest records this file), the node never turns Ready.
func failingKubelet(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "kubelet")
	must(t, os.WriteFile(p, []byte("#!/bin/sh\necho 'kubelet: failing at start on purpose (fleet rollout e2e)' >&2\nexit 1\n"), 0o755))
	return p
}

// previousKubelet is the 1.34 kubelet `build-k8s.sh --module cmd-1.34`
// made (cached; make test builds it first).
func previousKubelet(t *testing.T) string {
	out, err := exec.Command("bash", filepath.Join(repoRoot(), "test", "e2e", "build-k8s.sh"), "--module", "cmd-1.34", "--print-dir").Output()
	must(t, err)
	p := filepath.Join(strings.TrimSpace(string(out)), "bin", "kubelet")
	if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("no %s: build it with test/e2e/build-k8s.sh --module cmd-1.34 (about 15 minutes cold on 2 busy cores)", p)
	}
	return p
}
