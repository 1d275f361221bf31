package preflight

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/Azure/aks-flex-node/internal/state"
)

func TestExistingDeployment(t *testing.T) {
	h := newHost(t)
	want(t, h.run(NameExistingDeployment), SeverityOK, "no earlier install")

	h.mkdir("var/lib/machines/kube2")
	want(t, h.run(NameExistingDeployment), SeverityWarning, "/var/lib/machines/kube2", "no /var/lib/aks-flex-node/state.json", "aks-flex-node reset")

	h.file("etc/systemd/system/aks-flex-node-agent.service", "[Service]\n")
	want(t, h.run(NameExistingDeployment), SeverityWarning, "/etc/systemd/system/aks-flex-node-agent.service", "aks-flex-node reset")

	// A converged install: the state file records this very config.
	env := h.env() // writes the config file
	data, err := os.ReadFile(h.configFile())
	if err != nil {
		t.Fatal(err)
	}
	h.file("var/lib/aks-flex-node/state.json", `{"version": 3, "configSHA256": "`+state.ConfigDigest(data)+`", "machines": {"active": "kube2"}}`)
	want(t, runNamed(t, env, NameExistingDeployment), SeverityOK, "converged: a re-run of start changes nothing")

	// The same host with a changed config is an install this config did not make.
	h.set("agent.logLevel", "debug")
	want(t, h.run(NameExistingDeployment), SeverityWarning, "different config", state.ConfigDigest(data)[:12], "aks-flex-node reset")
	// Unless it is the node this start repaves to the changed config.
	env = h.env()
	env.Repaving = "components.kubernetes is 1.35.4; machine kube2 runs 1.34.2"
	want(t, runNamed(t, env, NameExistingDeployment), SeverityOK, "records another config (configSHA256 "+state.ConfigDigest(data)[:12], "start repaves the node to this one: components.kubernetes is 1.35.4")

	h.file("var/lib/aks-flex-node/state.json", `{"machines": {}}`)
	want(t, h.run(NameExistingDeployment), SeverityWarning, "no configSHA256", "aks-flex-node reset")

	h.file("var/lib/aks-flex-node/state.json", `not json`)
	want(t, h.run(NameExistingDeployment), SeverityWarning, "cannot be read", "aks-flex-node reset")
}

func TestArtifactSources(t *testing.T) {
	h := newHost(t)
	want(t, h.run(NameArtifactSources), SeverityOK, "online", "not probed")

	h.set("bootstrap.offlineArtifacts.source", "oci://registry.example/bundles/k8s:{{ .KubernetesVersion }}")
	want(t, h.run(NameArtifactSources), SeverityOK, "oci://registry.example/bundles/k8s:1.35.0: checked at pull time")

	h.set("components.kubernetes", "1.35.2")
	h.set("bootstrap.offlineArtifacts.source", "/var/lib/aks-flex-node/bundles/k8s-{{ .KubernetesVersion }}")
	want(t, h.run(NameArtifactSources), SeverityError, "/var/lib/aks-flex-node/bundles/k8s-1.35.2", "bootstrap.offlineArtifacts.source", "no such file")

	bundle := "var/lib/aks-flex-node/bundles/k8s-1.35.2"
	h.mkdir(bundle)
	want(t, h.run(NameArtifactSources), SeverityError, "no readable manifest.json")

	h.file(bundle+"/manifest.json", `{"version": 1, "files": [{"path": "bin/kubelet", "size": 3}, {"path": "cni.tgz"}]}`)
	h.file(bundle+"/bin/kubelet", "elf")
	h.file(bundle+"/bin/kubelet.sha256", "abc")
	h.file(bundle+"/cni.tgz", "tgz")
	want(t, h.run(NameArtifactSources), SeverityError, "incomplete", "cni.tgz.sha256")

	h.file(bundle+"/cni.tgz.sha256", "def")
	want(t, h.run(NameArtifactSources), SeverityOK, "all 2 listed files")

	// file:// sources are the same directory.
	h.set("bootstrap.offlineArtifacts.source", "file:///var/lib/aks-flex-node/bundles/k8s-{{ .KubernetesVersion }}")
	env := h.env()
	var verified string
	env.VerifyOfflineArtifacts = func(ctx context.Context, dir string) (string, error) {
		verified = dir
		return "", errors.New("bin/kubelet: sha256 mismatch")
	}
	want(t, runNamed(t, env, NameArtifactSources), SeverityError, "does not verify", "sha256 mismatch")
	if verified != filepath.Join(h.root, bundle) {
		t.Errorf("hook got %q, want %q", verified, filepath.Join(h.root, bundle))
	}
	env.VerifyOfflineArtifacts = func(context.Context, string) (string, error) {
		return "verified (unchanged since 2026-01-02T03:04:05Z)", nil
	}
	want(t, runNamed(t, env, NameArtifactSources), SeverityOK, "2 files present, verified (unchanged since 2026-01-02T03:04:05Z)")

	h.file(bundle+"/manifest.json", `{"files": [{"path": "../../../../etc/shadow"}]}`)
	want(t, h.run(NameArtifactSources), SeverityError, "not a path inside the bundle")
	h.file(bundle+"/manifest.json", `{"files": []}`)
	want(t, h.run(NameArtifactSources), SeverityError, "lists no files")

	// Upstream's layout lists no files: the artifact package derives and
	// verifies them (the hook), and names what is wrong.
	h.set("bootstrap.offlineArtifacts.source", "/var/lib/aks-flex-node/bundles/k8s-{{ .KubernetesVersion }}")
	h.file(bundle+"/manifest.json", `{"versions": {"kubernetes": "v1.35.2"}, "containerImages": []}`)
	want(t, h.run(NameArtifactSources), SeverityOK, "upstream's layout", "checked at start")
	env = h.env()
	env.VerifyOfflineArtifacts = func(ctx context.Context, dir string) (string, error) {
		return "", errors.New("kubernetes/v1.35.2/bin/linux/amd64/kube-proxy: unreadable")
	}
	want(t, runNamed(t, env, NameArtifactSources), SeverityError, "(upstream's layout) does not verify", "kube-proxy: unreadable")
	env.VerifyOfflineArtifacts = func(context.Context, string) (string, error) { return "verified now", nil }
	want(t, runNamed(t, env, NameArtifactSources), SeverityOK, "(upstream's layout): verified now")

	// oci:// sources: inspected through the hook, with the expanded ref.
	h.set("bootstrap.offlineArtifacts.source", "oci://127.0.0.1:5000/aks-flex/bootstrap-artifacts:k8s-{{ .KubernetesVersion }}")
	env = h.env()
	want(t, runNamed(t, env, NameArtifactSources), SeverityOK, "checked at pull time")
	var inspected string
	env.InspectOfflineArtifacts = func(ctx context.Context, ref string) error {
		inspected = ref
		return errors.New("kubernetes/v1.35.2/bin/linux/amd64/kubelet: layer sha256:aa != manifest sha256 bb")
	}
	want(t, runNamed(t, env, NameArtifactSources), SeverityError, "does not verify", "kubelet: layer sha256:aa", "artifacts push")
	if inspected != "oci://127.0.0.1:5000/aks-flex/bootstrap-artifacts:k8s-1.35.2" {
		t.Errorf("hook got %q", inspected)
	}
	env.InspectOfflineArtifacts = func(context.Context, string) error { return nil }
	want(t, runNamed(t, env, NameArtifactSources), SeverityOK, "file digests match")
}

// TestPathsResolveInsideTheRoot: an image tree's absolute links name the
// image's files. /var/lib/aks-flex-node -> /data/state resolves to
// <root>/data/state, never to the running host's /data/state.
func TestPathsResolveInsideTheRoot(t *testing.T) {
	h := newHost(t)
	h.mkdir("data/state")
	h.mkdir("var/lib")
	if err := os.Symlink("/data/state", filepath.Join(h.root, "var/lib/aks-flex-node")); err != nil {
		t.Fatal(err)
	}
	h.file("data/state/state.json", `not json`)
	want(t, h.run(NameExistingDeployment), SeverityWarning, "/var/lib/aks-flex-node/state.json", "cannot be read")

	// A dangling link is still an entry: existing-deployment looks at
	// the machine dir itself, not at what it names.
	h.file("data/state/state.json", `{"configSHA256": ""}`)
	h.mkdir("var/lib/machines")
	if err := os.Symlink("/nowhere", filepath.Join(h.root, "var/lib/machines/kube1")); err != nil {
		t.Fatal(err)
	}
	want(t, h.run(NameExistingDeployment), SeverityWarning, "/var/lib/machines/kube1")
}
